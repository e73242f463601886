"""Write deploy/seccomp/runner-sandbox.json: a container engine's default seccomp profile, plus what
bubblewrap needs to give every run its own namespaces inside the container.

    python scripts/seccomp_profile.py [--base /usr/share/containers/seccomp.json] [--out PATH] [--check]

The base is the default profile of podman (containers-common, Apache-2.0), in the JSON format Docker
reads too; its rules are kept as they are, except that the syscalls below are taken out of whatever
rule held them (some were allowed only with CAP_SYS_ADMIN, which the hardened line drops) and allowed
unconditionally in one rule of their own. Nothing else changes. `--check` exits 1 when the committed
profile differs from what the base would give (tests/deploy/test_packaging.py runs it where the base exists).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASE = Path("/usr/share/containers/seccomp.json")
OUT = REPO / "deploy" / "seccomp" / "runner-sandbox.json"
# What bubblewrap calls to build a run's sandbox as an unprivileged user: a user namespace and the
# others (clone, clone3, unshare), its mounts (mount, umount2, pivot_root) and the sandbox's own
# host name (sethostname; setdomainname goes with it). Each of them acts only inside namespaces
# the caller owns: with every capability dropped, none reaches the container's own mounts or names.
SANDBOX_SYSCALLS = ("clone", "clone3", "mount", "pivot_root", "setdomainname", "sethostname", "umount2", "unshare")
COMMENT = "python-runner-mcp: bubblewrap builds each run's namespaces and mounts (see deploy/seccomp/README.md)"


def sandbox_profile(base: dict[str, Any]) -> dict[str, Any]:
    """`base` with SANDBOX_SYSCALLS allowed unconditionally and nowhere else."""
    rules = []
    for rule in base["syscalls"]:
        names = [name for name in rule["names"] if name not in SANDBOX_SYSCALLS]
        if names:
            rules.append({**rule, "names": names})
    rules.append(
        {
            "names": list(SANDBOX_SYSCALLS),
            "action": "SCMP_ACT_ALLOW",
            "args": [],
            "comment": COMMENT,
            "includes": {},
            "excludes": {},
        }
    )
    return {**base, "syscalls": rules}


def render(profile: dict[str, Any]) -> str:
    return json.dumps(profile, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", type=Path, default=BASE, help="the engine's default profile (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=OUT, help="where to write (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    text = render(sandbox_profile(json.loads(args.base.read_text())))
    if args.check:
        if args.out.read_text() != text:
            sys.stderr.write(f"{args.out} differs from what {args.base} gives: run scripts/seccomp_profile.py\n")
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
