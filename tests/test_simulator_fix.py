"""NVFlare's simulator names each site's worker through one dict its starting threads share
(flare/simulator_fix.py): with serialise_client_starts, two workers that answer at the same moment still
get their own names."""

import pickle
import threading
import time

import pytest
from nvflare.private.fed.app.simulator.simulator_runner import SimulatorClientRunner

from vflflare.flare import simulator_fix


def _start_two_workers(monkeypatch, serialised: bool) -> dict[int, str]:
    sent: dict[int, str] = {}
    together = threading.Barrier(2)

    class Worker:  # a multiprocessing connection: pickles the message when it is sent
        def __init__(self, port: int) -> None:
            self.port = port

        def send(self, data: dict) -> None:
            sent[self.port] = pickle.loads(pickle.dumps(data))["client_name"]

    def answers_together(self, open_port, timeout=60.0):
        together.wait()
        return Worker(open_port)

    monkeypatch.setattr(SimulatorClientRunner, "_create_connection", answers_together)
    monkeypatch.setattr(SimulatorClientRunner, "_vflflare_serialised", False, raising=False)
    if serialised:
        simulator_fix.serialise_client_starts()
    runner = object.__new__(SimulatorClientRunner)
    runner.build_ctx = {}

    def start(name: str, port: int) -> None:  # do_one_task's steps from connecting to sending the name
        conn = runner._create_connection(port)
        runner.build_ctx["client_name"] = name
        time.sleep(0.05)  # copying the deploy arguments
        conn.send(runner.build_ctx)

    threads = [threading.Thread(target=start, args=(f"site-{port}", port)) for port in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    return sent


def test_without_the_fix_two_workers_get_one_name(monkeypatch):
    sent = _start_two_workers(monkeypatch, serialised=False)
    assert len(set(sent.values())) == 1  # the race this module closes


@pytest.mark.parametrize("attempt", range(3))
def test_each_worker_gets_its_own_name(monkeypatch, attempt):
    assert _start_two_workers(monkeypatch, serialised=True) == {1: "site-1", 2: "site-2"}
