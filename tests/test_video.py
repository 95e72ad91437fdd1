"""H.264 videos: what browsers play (h264, yuv420p, even sizes), tiled streams, readable captions."""

from __future__ import annotations

import av
import numpy as np
import pytest

from robot_rl.data.video import decode_video, draw_caption, tile_frames, write_video


def gradient_stream(frames: int, height: int, width: int, channel: int) -> np.ndarray:
    """Frames with a horizontal ramp in one colour channel that moves with time: each frame is distinct."""
    stream = np.zeros((frames, height, width, 3), dtype=np.uint8)
    ramp = np.linspace(40, 200, width).astype(np.uint8)
    for t in range(frames):
        stream[t, :, :, channel] = np.roll(ramp, 3 * t)[None, :]
    return stream


def probe(path) -> dict:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(video=0))
        return {"codec": stream.codec_context.name, "pix_fmt": stream.codec_context.pix_fmt,
                "width": stream.codec_context.width, "height": stream.codec_context.height, "frames": frames,
                "fps": float(stream.average_rate)}


def test_two_streams_side_by_side_as_h264(tmp_path):
    front, wrist = gradient_stream(12, 64, 64, 0), gradient_stream(12, 64, 64, 2)  # red and blue
    path = tmp_path / "videos" / "ep.mp4"
    assert write_video(path, [front, wrist], fps=10) == 12
    assert probe(path) == {"codec": "h264", "pix_fmt": "yuv420p", "width": 128, "height": 64, "frames": 12,
                           "fps": 10.0}
    decoded = list(decode_video(path))
    assert [round(t, 3) for t, _ in decoded] == [round(0.1 * i, 3) for i in range(12)]
    for (_, frame), expected in zip(decoded, np.concatenate([front, wrist], axis=2), strict=True):
        error = np.abs(frame.astype(int) - expected.astype(int))
        assert error.mean() < 3, "frames must survive encoding (and stay RGB, not BGR)"
    assert decoded[0][1][:, :64, 0].mean() > 100 and decoded[0][1][:, :64, 2].mean() < 10  # front is red
    assert decoded[0][1][:, 64:, 2].mean() > 100 and decoded[0][1][:, 64:, 0].mean() < 10  # wrist is blue
    assert not list(tmp_path.glob("videos/.*"))  # no partial file left next to it


def test_odd_sizes_are_padded_and_other_heights_resized(tmp_path):
    path = tmp_path / "odd.mp4"
    write_video(path, [gradient_stream(3, 33, 47, 1)], fps=12.5)
    info = probe(path)
    assert (info["width"], info["height"], info["frames"], info["fps"]) == (48, 34, 3, 12.5)
    _, first = next(decode_video(path))
    assert first[-1].mean() < 25 and first[:, -1].mean() < 25 and first[:-1, :-1, 1].mean() > 80  # black padding
    assert tile_frames([np.zeros((2, 10, 10, 3), np.uint8), np.zeros((2, 20, 30, 3), np.uint8)]).shape == (2, 20, 50, 3)


def test_captions_are_drawn_readably_on_any_background(tmp_path):
    for grey in (0, 128, 255):
        frame = np.full((64, 128, 3), grey, dtype=np.uint8)
        drawn = draw_caption(frame, "step 12/50  success")
        changed = np.any(drawn != grey, axis=2)
        assert changed[:20].sum() > 50 and not changed[30:].any()  # text in the top-left corner only
        assert (drawn[:20] > 200).all(axis=2).sum() > 20  # white letters ...
        assert (drawn[:20] < 80).all(axis=2).sum() > 200  # ... on a dark box
        assert np.array_equal(frame, np.full((64, 128, 3), grey, dtype=np.uint8))  # the input is not modified
    long = draw_caption(np.zeros((64, 64, 3), np.uint8), "a caption far too long for such a small frame")
    assert long[:, -2:].max() == 0  # shrunk to fit, not clipped at the edge

    stream = np.full((4, 64, 64, 3), 90, dtype=np.uint8)
    path = tmp_path / "captioned.mp4"
    write_video(path, [stream], fps=10, captions=["step 1/4", "step 2/4", "", "step 4/4  success"])
    frames = [frame for _, frame in decode_video(path)]
    assert frames[0][:20].max() > 200 and frames[2][:20].max() < 120  # the empty caption draws nothing


def test_bad_input_is_refused_without_leaving_a_file(tmp_path):
    stream = np.zeros((4, 16, 16, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="3 captions for 4 frames"):
        write_video(tmp_path / "a.mp4", [stream], fps=10, captions=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"must end in \.mp4"):
        write_video(tmp_path / "a.avi", [stream], fps=10)
    with pytest.raises(ValueError, match="expected uint8 frames"):
        write_video(tmp_path / "a.mp4", [stream.astype(np.float32)], fps=10)
    with pytest.raises(ValueError, match="differ in length"):
        write_video(tmp_path / "a.mp4", [stream, stream[:2]], fps=10)
    with pytest.raises(ValueError, match="fps must be a positive number"):
        write_video(tmp_path / "a.mp4", [stream], fps=0)
    assert list(tmp_path.iterdir()) == []
