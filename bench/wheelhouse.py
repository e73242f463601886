"""What a package from the wheelhouse costs a run (issue 27): its first use (install, compile, run)
and its second, against a run that imports it from a package environment it was installed into
beforehand.

    python bench/wheelhouse.py [--rounds N] [--sandbox MODE] [--module sympy]

Three pools of the same configuration (RUNNER_SANDBOX=MODE, the package environment `.sandbox-env`):
- `first`: the wheelhouse with an empty cache each round: the call installs what the import needs;
- `second`: the wheelhouse with its cache filled by an earlier call;
- `preinstalled`: no wheelhouse, but a package environment that has the distributions in it
  (`.sandbox-env` hard-linked, the distributions added with pip --target from the same wheels and
  compiled the same way).
Each round times one call in each, interleaved, so that machine noise hits all of them alike. The pools do
not sweep strays (three subreaper pools in one process would sweep each other's zygotes); a serving
server's sweep knows the install's compile (`processes.helpers`), so it installs the same, wholly compiled
(tests/e2e/execution/test_provided.py checks one .pyc per .py with a sweeping pool and calls going on).
Printed: p50 and p90 of each, and the ratios of the p50s against `preinstalled`. The target is
`second` within 1.2x of `preinstalled`. This is a script that prints numbers; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from runner.config import Config  # noqa: E402
from runner.config.disk import open_environment  # noqa: E402
from runner.execution.pool import Pool  # noqa: E402
from runner.execution.supply import imported_packages  # noqa: E402
from runner.outcome import RunRequest, Status  # noqa: E402

CODE = {"sympy": "import sympy\nprint(sympy.sqrt(8))", "sklearn": "import sklearn.linear_model\nprint('ok')"}


def preinstalled(scratch: Path, names: tuple[str, ...], python: str) -> Path:
    """A package environment: `.sandbox-env`'s site-packages hard-linked, `names` added from the wheelhouse."""
    env = scratch / "preinstalled"
    site = env / "site-packages"
    shutil.copytree(REPO / ".sandbox-env" / "site-packages", site, copy_function=os.link, symlinks=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--disable-pip-version-check"]
    pip += ["--find-links", str(REPO / ".wheelhouse"), "--target", str(scratch / "added"), *names]
    subprocess.run(pip, check=True)
    for entry in (scratch / "added").iterdir():
        if entry.name != "bin":
            shutil.move(str(entry), site / entry.name)
    compile_all = "import compileall, sys; compileall.compile_dir(sys.argv[1], quiet=2, workers=0, "
    compile_all += "invalidation_mode=compileall.py_compile.PycInvalidationMode.CHECKED_HASH)"
    subprocess.run([python, "-I", "-S", "-c", compile_all, str(site)], check=True)
    return env


def config(environ: dict[str, str]) -> Config:
    return open_environment(Config.from_env({"RUNNER_LOG_LEVEL": "error", "RUNNER_POOL_SIZE": "1", **environ}))


async def timed(pool: Pool, code: str) -> float:
    started = time.perf_counter()
    result = await pool.run(RunRequest("bench", code, 120))
    elapsed = time.perf_counter() - started
    if result.status is not Status.OK:
        raise SystemExit(f"the run failed: {result.to_text()}")
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--sandbox", default="auto")
    parser.add_argument("--module", choices=sorted(CODE), default="sympy")
    args = parser.parse_args()
    code = CODE[args.module]
    base = {"RUNNER_SANDBOX": args.sandbox, "RUNNER_PACKAGES": str(REPO / ".sandbox-env")}
    house = {**base, "RUNNER_WHEELHOUSE": str(REPO / ".wheelhouse")}
    with tempfile.TemporaryDirectory(prefix="bench-wheelhouse-") as scratch_name:
        scratch = Path(scratch_name)
        os.chmod(scratch, 0o711)  # noqa: S103  (searchable: a root server's runs are other uids)
        warm = config({**house, "RUNNER_WHEELHOUSE_CACHE": str(scratch / "cache")})
        async with Pool.open(warm) as second:
            assert second.packages is not None
            names = second.packages.needed(imported_packages(code))
            env = preinstalled(scratch, names, warm.python)
            async with Pool.open(config({**base, "RUNNER_PACKAGES": str(env)})) as before:
                await timed(second, code)  # installs: every later call in this pool is a second use
                await timed(before, code)
                times: dict[str, list[float]] = {"first": [], "second": [], "preinstalled": []}
                for round_ in range(args.rounds):
                    cache = scratch / f"first-{round_}"
                    fresh = config({**house, "RUNNER_WHEELHOUSE_CACHE": str(cache)})
                    async with Pool.open(fresh) as first:
                        times["first"].append(await timed(first, code))
                    shutil.rmtree(cache)
                    times["second"].append(await timed(second, code))
                    times["preinstalled"].append(await timed(before, code))
    sys.stdout.write(f"{args.module} ({', '.join(names)}), RUNNER_SANDBOX={args.sandbox}, {args.rounds} rounds\n")
    baseline = statistics.median(times["preinstalled"])
    for name, values in times.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else p50
        line = f"  {name:13} p50 {p50 * 1000:8.1f} ms  p90 {p90 * 1000:8.1f} ms  {p50 / baseline:5.2f}x preinstalled"
        sys.stdout.write(line + "\n")


if __name__ == "__main__":
    asyncio.run(main())
