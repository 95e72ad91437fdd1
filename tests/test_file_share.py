"""robot_rl.wire.file_share without ROS: bundle digests, the receiving assembly, the cache and the wire messages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from robot_rl.wire import file_share as fs
from robot_rl.wire.file_share import CHUNK_SIZE, Assembly, FileShareError, Manifest, bundle_of

COMPUTES_ONLY = True  # names robot_rl.ros modules, starts no ROS 2 node (tests/conftest.py)


def make_policy(folder: Path, seed: int = 0, size: int = 2 * CHUNK_SIZE + 1000) -> Path:
    """A policy-like folder: a config, weights over a few chunks, a validation record, a nested file, an empty file."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    (folder / "policy.json").write_text('{"kind": "diffusion"}')
    (folder / "model.safetensors").write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    (folder / "validation.json").write_text('{"format": 1, "records": []}')
    (folder / "sub").mkdir()
    (folder / "sub" / "c.0").write_bytes(b"x" * 10)
    (folder / "sub" / "empty").write_bytes(b"")
    return folder


def transfer(bundle, assembly: Assembly) -> None:
    for path, offset, data in fs.read_chunks(bundle):
        assembly.add(path, offset, data)


def same_tree(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    return files_a == files_b and all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)


def test_digest_is_stable_and_names_content_only(tmp_path):
    a = make_policy(tmp_path / "one" / "policy")
    b = make_policy(tmp_path / "two" / "policy")
    os.utime(b / "model.safetensors", (1, 1))  # times are not content
    first, second = bundle_of(a, "runs/dp/policy"), bundle_of(b, "elsewhere")
    assert first.digest == second.digest == bundle_of(a).digest
    assert [e.path for e in first.manifest.entries] == sorted(e.path for e in first.manifest.entries)
    assert first.manifest.target == "policy" and first.path == a.resolve()
    assert {e.path for e in first.manifest.entries} >= {"policy/validation.json", "policy/sub/empty"}
    # the canonical form is fixed: a known manifest has a known digest
    known = Manifest("x", (fs.Entry("x", 3, "0" * 64),))
    assert known.canonical() == b'{"entries":[["x",3,"' + b"0" * 64 + b'"]],"format":1,"target":"x"}'
    assert known.digest == "f1af3def88792b1f8ea96f3231b35167541f359b6b77674af213feea9b226da9"


def test_one_changed_byte_or_name_changes_the_digest(tmp_path):
    folder = make_policy(tmp_path / "policy")
    before = bundle_of(folder).digest
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[CHUNK_SIZE + 123] ^= 1
    (folder / "model.safetensors").write_bytes(bytes(data))
    changed = bundle_of(folder).digest
    assert changed != before
    (folder / "sub" / "c.0").rename(folder / "sub" / "c.1")
    assert bundle_of(folder).digest not in (before, changed)


def test_a_file_travels_with_its_validation_record(tmp_path):
    policy = tmp_path / "policy.msgpack"
    policy.write_bytes(b"weights")
    alone = bundle_of(policy)
    (tmp_path / "policy.msgpack.validation.json").write_text("{}")
    (tmp_path / "unrelated.txt").write_text("not part of it")
    bundle = bundle_of(policy)
    assert [e.path for e in bundle.manifest.entries] == ["policy.msgpack", "policy.msgpack.validation.json"]
    assert bundle.digest != alone.digest and bundle.path == policy.resolve()


def test_received_bundle_is_byte_identical_and_appears_at_once(tmp_path):
    source = make_policy(tmp_path / "src" / "policy")
    bundle = bundle_of(source, "runs/dp/policy")
    cache = tmp_path / "cache"
    assembly = Assembly(bundle.name, bundle.manifest, cache, "base")
    final = cache / bundle.digest
    chunks = list(fs.read_chunks(bundle))
    assert len(chunks) == 3 + 1 + 1 + 1  # weights in three chunks, three small files; the empty file needs none
    for path, offset, data in chunks[:-1]:
        assembly.add(path, offset, data)
        assert not final.exists() and fs.cached(bundle.digest, cache) is None  # half received: nowhere to be seen
    assert assembly.missing() == [chunks[-1][0]]
    assembly.add(*chunks[-1])
    assert not assembly.add(*chunks[0])  # a duplicate is ignored
    received = assembly.finish()
    assert received.path == final / "policy" and same_tree(source, received.path)
    assert not list((cache / fs.PARTIAL_DIR).iterdir())
    reused = fs.cached(bundle.digest, cache)  # a complete copy is used again without a transfer, verified
    assert reused is not None and reused.path == received.path


def test_a_renewed_request_asks_for_exactly_the_lost_chunks(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"))
    assembly = Assembly("p", bundle.manifest, tmp_path / "cache")
    chunks = list(fs.read_chunks(bundle))
    lost = {1, 4}  # the second chunk of the weights, and one small file
    for index, chunk in enumerate(chunks):
        if index not in lost:
            assembly.add(*chunk)
    want = assembly.wanted()
    assert want == {chunks[1][0]: [chunks[1][1]], chunks[4][0]: [0]}
    resent = list(fs.read_chunks(bundle, want))
    assert [(p, o) for p, o, _ in resent] == [(chunks[i][0], chunks[i][1]) for i in sorted(lost)]
    for chunk in resent:
        assembly.add(*chunk)
    assert assembly.complete and same_tree(tmp_path / "policy", assembly.finish().path)


def test_out_of_order_and_repeated_chunks_still_verify(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"))
    assembly = Assembly("p", bundle.manifest, tmp_path / "cache")
    chunks = list(fs.read_chunks(bundle))
    for chunk in reversed(chunks):
        assembly.add(*chunk)
    assert same_tree(tmp_path / "policy", assembly.finish().path)


def test_a_corrupted_chunk_is_rejected_naming_the_file_and_both_hashes(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"), "runs/dp/policy")
    assembly = Assembly(bundle.name, bundle.manifest, tmp_path / "cache", "base")
    chunks = list(fs.read_chunks(bundle))
    path, offset, data = chunks[1]
    bad = bytearray(data)
    bad[7] ^= 0xFF
    expected = bundle.manifest.entry(path).sha256
    with pytest.raises(FileShareError) as error:
        for chunk in chunks[:1] + [(path, offset, bytes(bad))] + chunks[2:]:
            assembly.add(*chunk)
    message = str(error.value)
    assert "\n" not in message and message.startswith("base runs/dp/policy: policy/model.safetensors arrived")
    assert fs.short(expected) in message and message.count("sha256") == 1 and message.count("…") == 2
    assembly.abandon()
    assert not (tmp_path / "cache" / bundle.digest).exists()


@pytest.mark.parametrize("path, offset, size, what", [
    ("policy/nothere", 0, 10, "not in the bundle"),
    ("policy/model.safetensors", 5, CHUNK_SIZE, "malformed chunk"),
    ("policy/model.safetensors", 0, 17, "malformed chunk"),
    ("policy/model.safetensors", 3 * CHUNK_SIZE, 1, "malformed chunk"),
])
def test_chunks_the_manifest_has_no_place_for_are_errors(tmp_path, path, offset, size, what):
    bundle = bundle_of(make_policy(tmp_path / "policy"))
    assembly = Assembly("p", bundle.manifest, tmp_path / "cache")
    with pytest.raises(FileShareError, match=what):
        assembly.add(path, offset, b"\0" * size)


def test_an_incomplete_bundle_cannot_finish_and_a_damaged_cache_entry_is_not_used(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"))
    cache = tmp_path / "cache"
    assembly = Assembly("p", bundle.manifest, cache)
    with pytest.raises(FileShareError, match="files still missing"):
        assembly.finish()
    transfer(bundle, assembly)
    received = assembly.finish()
    (received.path / "sub" / "c.0").unlink()  # a file removed from the cache by hand
    assert fs.cached(bundle.digest, cache) is None and not (cache / bundle.digest).exists()


def test_two_receivers_of_one_bundle_end_with_one_copy(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"))
    cache = tmp_path / "cache"
    first, second = Assembly("p", bundle.manifest, cache), Assembly("p", bundle.manifest, cache)
    transfer(bundle, first)
    transfer(bundle, second)
    assert first.finish().path == second.finish().path == cache / bundle.digest / "policy"
    assert not list((cache / fs.PARTIAL_DIR).iterdir())


def test_a_file_changed_after_it_was_offered_is_not_sent(tmp_path):
    folder = make_policy(tmp_path / "policy")
    bundle = bundle_of(folder, "demos")
    (folder / "policy.json").write_text('{"kind": "changed"}')
    with pytest.raises(FileShareError, match="demos: policy/policy.json changed since it was offered"):
        list(fs.read_chunks(bundle))


def test_mismatch_is_one_line_with_both_hashes_and_the_files_that_differ(tmp_path):
    here, there = "a" * 64, "b" * 64
    line = fs.mismatch_message("base", "runs/dp/policy", here, there, "the learner's")
    assert line.startswith("base runs/dp/policy: this host's copy sha256 aaaaaaaaaaaaaaaa… differs from the "
                           "learner's bbbbbbbbbbbbbbbb…: put the same files")
    assert "\n" not in line
    one = bundle_of(make_policy(tmp_path / "a" / "policy"))
    other_folder = make_policy(tmp_path / "b" / "policy")
    (other_folder / "validation.json").write_text("{}")  # validated again on one host only
    (other_folder / "extra").write_text("x")
    other = bundle_of(other_folder)
    assert fs.differing_files(one.manifest, other.manifest) == ["extra", "validation.json"]
    line = fs.mismatch_message("base", "p", one.digest, other.digest, "the learner's",
                               fs.differing_files(one.manifest, other.manifest))
    assert f"differs from the learner's {fs.short(other.digest)} (files that differ: extra, validation.json): " in line


@pytest.mark.parametrize("bad", ["../etc/passwd", "/etc/passwd", "a/../b", "a//b", "./a", "a\\b", ""])
def test_manifests_with_paths_outside_their_folder_are_refused(bad):
    with pytest.raises(FileShareError):
        Manifest.from_wire({"format": 1, "target": "", "entries": [[bad, 1, "0" * 64]]})


def test_wire_messages_round_trip_and_a_false_digest_is_refused(tmp_path):
    bundle = bundle_of(make_policy(tmp_path / "policy"), "runs/dp/policy")
    peer, host, node, offers = fs.decode_offers(fs.encode_offers("h:1:/learner", "h", "/learner", [bundle]))
    assert (peer, host, node) == ("h:1:/learner", "h", "/learner")
    assert offers[0].name == "runs/dp/policy" and offers[0].digest == bundle.digest
    assert offers[0].manifest == bundle.manifest
    assert fs.decode_request(fs.encode_request("r", "s", bundle.digest)) == fs.Request("r", "s", bundle.digest)
    want = {"policy/model.safetensors": [CHUNK_SIZE]}
    assert fs.decode_request(fs.encode_request("r", "s", bundle.digest, want, 7)) == \
        fs.Request("r", "s", bundle.digest, want, 7)
    assert fs.decode_request(fs.encode_progress("r", "s", bundle.digest, 99)) == \
        fs.Request("r", "s", bundle.digest, None, 99, progress=True)
    chunk = fs.decode_chunk(fs.encode_chunk(bundle.digest, "policy/policy.json", 0, b"abc"))
    assert (chunk["path"], chunk["offset"], chunk["data"]) == ("policy/policy.json", 0, b"abc")
    assert fs.decode_chunk(fs.encode_refusal(bundle.digest, "s", "gone"))["error"] == "gone"
    from robot_rl.core.codec import pack, unpack

    forged = unpack(fs.encode_offers("p", "h", "/n", [bundle]))
    forged["bundles"][0]["digest"] = "f" * 64
    with pytest.raises(FileShareError, match="is not its manifest's"):
        fs.decode_offers(pack(forged))
    with pytest.raises(FileShareError, match="not a protocol-1 file_chunk"):
        fs.decode_chunk(pack({"kind": "weights"}))


def test_rate_limiter_paces_chunks():
    now = [0.0]
    limiter = fs.RateLimiter(1e6, clock=lambda: now[0])
    sent = 0
    while now[0] < 2.0:
        wait = limiter.wait_s(CHUNK_SIZE)
        if wait:
            now[0] += wait
            continue
        limiter.spend(CHUNK_SIZE)
        sent += CHUNK_SIZE
    assert 1.9e6 <= sent <= 2.0e6 + 2 * CHUNK_SIZE
    assert fs.RateLimiter(0).wait_s(CHUNK_SIZE) == 0.0


def test_cache_root_follows_the_environment(tmp_path):
    assert fs.cache_root({fs.CACHE_ENV: str(tmp_path)}) == tmp_path
    assert fs.cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/robot_rl/files")


def test_weights_carry_their_files_digests():
    from robot_rl.wire.protocol import TransportError
    from robot_rl.wire.weights import WeightsMessage, decode_weights, encode_weights
    from robot_rl.core.types import ObservationSpec

    spec = ObservationSpec.from_shapes({"state": ((3,), "float32")})
    message = WeightsMessage(1, b"w", spec, 2, {"base": "/runs/dp/policy"}, "residual",
                             files={"/runs/dp/policy": "c" * 64})
    assert decode_weights(encode_weights(message)).files == {"/runs/dp/policy": "c" * 64}
    plain = WeightsMessage(1, b"w", spec, 2, {}, "gaussian")
    assert b"files" not in encode_weights(plain) and decode_weights(encode_weights(plain)).files == {}
    from robot_rl.core.codec import pack, unpack

    bad = unpack(encode_weights(message))
    bad["files"] = {"x": "short"}
    with pytest.raises(TransportError, match="sha256"):
        decode_weights(pack(bad))


def test_the_deployment_gate_reads_the_same_policy_and_record_from_a_received_copy(tmp_path):
    from robot_rl.actor import deploy_gate as validate

    source = make_policy(tmp_path / "run" / "policy")
    (source / "validation.json").write_text(json.dumps({"format": validate.RECORD_FORMAT,
                                                        "records": [{"verdict": "pass"}]}))
    bundle = bundle_of(validate.policy_location(tmp_path / "run"), str(tmp_path / "run"))  # a run folder's policy
    assembly = Assembly(bundle.name, bundle.manifest, tmp_path / "cache", "base")
    transfer(bundle, assembly)
    copy = assembly.finish().path
    assert copy.name == "policy" and validate.policy_location(copy) == copy
    assert validate.policy_digest(copy) == validate.policy_digest(source)
    assert validate.read_records(copy) == validate.read_records(source) != []


class StubShare:
    """What the learner node asks of its FileShare, recorded."""

    def __init__(self, error: str | None = None):
        self.calls: list[tuple] = []
        self.error = error

    def fetch(self, name, what, expected=None, *, locate=None, should_stop=None):
        self.calls.append(("fetch", name, what))
        if self.error:
            raise FileShareError(self.error)
        return Path("/cache/0123") / Path(name).name

    def resolve(self, name, what, expected=None, **_):
        self.calls.append(("resolve", name, what))


def learner_stub(share, tmp_path, resuming=False):
    from types import SimpleNamespace

    return SimpleNamespace(files=share, settings={"base": "runs/dp/policy", "demo_path": str(tmp_path / "demos.zarr")},
                           server=SimpleNamespace(checkpoint_state={} if resuming else None),
                           _is_stopping=lambda: False)


def test_the_learner_fetches_a_base_and_demos_this_host_lacks_and_checks_those_it_has(tmp_path):
    from robot_rl.ros.nodes.learner_node import LearnerNode
    from robot_rl.ros.node_util import NodeStartupError
    from robot_rl.training.config import TrainConfig

    cfg = TrainConfig(policy="residual", base=(tmp_path / "runs/dp/policy").resolve(), demos=0,
                      demo_path=tmp_path / "demos.zarr")
    share = StubShare()
    fetched = LearnerNode._files_here(learner_stub(share, tmp_path), cfg)
    assert share.calls == [("fetch", "runs/dp/policy", "base"), ("fetch", str(tmp_path / "demos.zarr"), "demo_path")]
    assert fetched.base == Path("/cache/0123/policy") and fetched.demo_path == Path("/cache/0123/demos.zarr")
    (tmp_path / "demos.zarr").mkdir()  # demos here: used at once, checked against offers meanwhile
    share = StubShare()
    assert LearnerNode._files_here(learner_stub(share, tmp_path), cfg).demo_path == tmp_path / "demos.zarr"
    assert share.calls == [("fetch", "runs/dp/policy", "base"), ("resolve", str(tmp_path / "demos.zarr"),
                                                                 "demo_path")]
    share = StubShare()
    LearnerNode._files_here(learner_stub(share, tmp_path, resuming=True), cfg)  # a resumed run reads no demos
    assert [c[2] for c in share.calls] == ["base"]
    line = "base runs/dp/policy: not on this host, and no node offers it yet after 120 s"
    with pytest.raises(NodeStartupError, match="^base runs/dp/policy: not on this host"):
        LearnerNode._files_here(learner_stub(StubShare(line), tmp_path), cfg)
