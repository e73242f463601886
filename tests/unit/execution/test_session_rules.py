"""The sessions' pure rules (runner/execution/session_rules.py), without a process: when a session's next
state may be kept."""

from __future__ import annotations

from runner.config import MIB
from runner.execution.session_rules import over_budget


def test_a_state_is_refused_once_it_and_the_other_sessions_kept_states_pass_the_budget() -> None:
    assert over_budget(100 * MIB, 60 * MIB, 40 * MIB) == ""
    refusal = over_budget(100 * MIB, 60 * MIB, 41 * MIB)
    assert refusal.startswith("not kept: its state would hold 60 MiB, which with the other open sessions' 41 MiB")
    assert "budget of 100 MiB (RUNNER_SESSIONS_MEMORY_MB)" in refusal
