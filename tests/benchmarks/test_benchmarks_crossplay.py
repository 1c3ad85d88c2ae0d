"""benchmarks/crossplay.py: which algorithms can meet in a match, and a whole (tiny) cross-play of
MAPPO's teams against IPPO's, trained and played for real."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import crossplay  # noqa: E402


def test_only_algorithms_of_one_action_space_are_paired() -> None:
    assert crossplay.action_space_errors(["MADDPG", "DDPG"], "simple_push_v3") == []
    assert crossplay.action_space_errors(["MAPPO", "IPPO"], "simple_tag_v3") == []
    (error,) = crossplay.action_space_errors(["MADDPG", "MAPPO", "DDPG"], "simple_push_v3")
    assert error.startswith("MAPPO acts discretely, MADDPG does not")


def test_mappo_and_ippo_teams_meet_each_other_and_random_play(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["crossplay.py", "--algorithms", "MAPPO", "IPPO", "--scenarios", "simple_push_v3",
            "--steps", "800", "--seeds", "0", "--episodes", "2", "--eval-episodes", "1",
            "--out", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    crossplay.main()
    out = capsys.readouterr().out
    rows = {line.split(" | ")[0].lstrip("| "): line for line in out.splitlines() if " | " in line}
    for pairing in ("MAPPO vs MAPPO", "MAPPO vs IPPO", "IPPO vs MAPPO", "IPPO vs IPPO",
                    "MAPPO vs random", "random vs IPPO", "random vs random"):  # fmt: skip
        assert pairing in rows, out
    assert rows["IPPO vs MAPPO"].split(" | ")[1] == "1"  # one seed each: one match per pairing
    # Each run kept its checkpoint and summary, so --reuse skips it next time.
    for name in ("mappo-seed0", "ippo-seed0"):
        assert (tmp_path / "simple_push_v3" / name / "run.json").is_file()
    monkeypatch.setattr(sys, "argv", [*argv, "--reuse"])
    crossplay.main()
    assert "MAPPO seed 0: reused" in capsys.readouterr().out
