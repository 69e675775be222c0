"""scripts/gpu_check.sh's deadline: a device that cuts a command off at its limit loses every result unless the
script stops its steps in time to write the tarball (2026-12-04: one A/B call lost its summary that way)."""
import os
import pathlib
import shutil
import subprocess
import tarfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_deadline_stops_a_step_skips_the_rest_and_still_writes_the_tarball(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts" / "gpu").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu_check.sh", repo / "scripts" / "gpu_check.sh")
    (repo / "scripts" / "gpu" / "10_slow.sh").write_text(
        'echo started > "$STEP_OUT/mark"\nsleep 120 & wait\necho finished >> "$STEP_OUT/mark"\n')
    (repo / "scripts" / "gpu" / "20_next.sh").write_text('echo ran > "$STEP_OUT/mark"\n')
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_CHECK_DEADLINE_S": "30"}
    r = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=repo, env=env, capture_output=True, text=True,
                       timeout=100)
    summary = (out / "summary.txt").read_text()
    assert "slow rc=124" in summary and "next skipped: deadline" in summary, summary + r.stderr
    with tarfile.open(out / "gpu_check.tar.gz") as t:
        marks = {m.name: t.extractfile(m).read().decode() for m in t.getmembers() if m.name.endswith("mark")}
    assert marks == {"./slow/mark": "started\n"}
