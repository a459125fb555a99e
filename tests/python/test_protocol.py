"""measure.protocol on the CPU: judge-owned tensors a worker maps (writes reach the judge), the values
that travel as JSON, and one message per line over a socket."""

from __future__ import annotations

import socket

import pytest
import torch
from kernel_loop.measure import protocol


def test_a_shared_file_tensor_is_the_same_memory_in_both_views(tmp_path):
    like = torch.randn(6, 8)[:, 1:5]  # a strided view: the layout travels with it
    judge = protocol.alloc_shared(like, tmp_path, "b0", use_file=True)
    judge.copy_(like)
    entry = protocol.share(judge, tmp_path, "b0")
    assert entry["transport"] == "file" and entry["stride"] == list(like.stride())
    worker = protocol.open_shared(tmp_path, entry)
    assert torch.equal(worker, like)
    worker.mul_(2)  # what the worker writes, the judge reads
    assert torch.equal(judge, like * 2)


def test_constructor_values_keep_their_types():
    value = [8192, (8192, 1), 0.5, None, "x", {"k": (1, 2)}]
    assert protocol.decode_value(protocol.encode_value(value)) == value
    with pytest.raises(protocol.ProtocolError, match="cannot travel"):
        protocol.encode_value(object())


def test_messages_travel_one_per_line_and_a_closed_peer_is_a_protocol_error():
    a, b = socket.socketpair()
    ca, cb = protocol.Channel(a), protocol.Channel(b)
    ca.send({"op": "call", "k": "v1"})
    ca.send({"op": "bye"})
    assert cb.recv(5) == {"op": "call", "k": "v1"} and cb.recv(5) == {"op": "bye"}
    ca.close()
    with pytest.raises(protocol.ProtocolError):
        cb.recv(5)


def test_a_worker_without_the_judge_socket_says_so(monkeypatch):
    monkeypatch.delenv(protocol.SOCKET_ENV, raising=False)
    with pytest.raises(protocol.ProtocolError, match="started by the judge only"):
        protocol.connect_from_env()


def test_only_the_buffers_a_kernel_is_given_are_staged():
    """A returned output's buffer only receives the returned tensor, so the worker keeps no copy of it (at
    KernelBench's sizes that copy, in and out, was most of a call's cost); every buffer a call passes is."""
    from kernel_loop.measure.worker import handed_over

    kb = {"args": ["a0-t"], "state": {"weight": "p2-t"}, "outputs": {"out": "r1-t"}}
    cu = {"args": [{"ptr": "a0-t"}, {"ctype": "int", "value": 4}, {"ptr": "a1-t"}], "outputs": {"y": "a1-t"}}
    py = {"tensors": {"x": "a0-t", "y": "a1-t"}, "scalars": {"n": 4}, "outputs": {"out": "r2-t"}}
    assert handed_over([kb]) == {"a0-t", "p2-t"}
    assert handed_over([cu]) == {"a0-t", "a1-t"}
    assert handed_over([py, kb]) == {"a0-t", "a1-t", "p2-t"}
