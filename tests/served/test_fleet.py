"""The served tests' own harness (fleet.py), without a server: where it puts a server's port, and that a server
which could not bind its port is told apart at once and started again, not waited on for START_TIMEOUT."""
import sys

import pytest

import fleet as F


def test_free_ports_are_below_the_ranges_other_sockets_draw_from():
    ports = {F._free_port() for _ in range(32)}
    assert all(12000 <= p < 22000 for p in ports)  # SGLang's workers draw 22000-29999
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert max(ports) < int(f.read().split()[0])  # connect() and bind(0) draw from here


def _stand_in(srv: F.Server, message: str) -> None:
    """srv runs a process that logs `message` and lives on, as SGLang's HTTP server does when its bind fails."""
    srv.argv = [sys.executable, "-c", f"import time; print({message!r}, flush=True); time.sleep(120)"]


def test_a_server_whose_port_was_taken_raises_port_taken_at_once(tmp_path):
    srv = F.Server("plain", str(tmp_path))
    _stand_in(srv, "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 1): address "
                   "already in use")
    srv.start()
    try:
        with pytest.raises(F.PortTaken, match="port .* taken"):
            srv.wait(timeout=60)
    finally:
        srv.stop()


def test_a_server_that_is_only_slow_is_waited_on(tmp_path):
    srv = F.Server("plain", str(tmp_path))
    _stand_in(srv, "loading weights")
    srv.start()
    try:
        with pytest.raises(RuntimeError, match="did not answer within 3 s"):
            srv.wait(timeout=3)
    finally:
        srv.stop()


def test_the_fleet_starts_a_server_again_on_another_port_when_its_port_was_taken(tmp_path, monkeypatch):
    made = []

    class Taken(F.Server):
        def __init__(self, name, logdir):
            super().__init__(name, logdir)
            made.append(self)
            if len(made) == 1:
                _stand_in(self, "ERROR: ... address already in use")
            else:
                _stand_in(self, "up")
                self.wait = lambda timeout=None: None  # the second start answers

    monkeypatch.setattr(F, "Server", Taken)
    fleet = F.Fleet()
    try:
        assert fleet.url("plain") == made[1].url
        assert len(made) == 2 and made[0].proc is None and made[1].alive()
    finally:
        fleet.stop_all()
