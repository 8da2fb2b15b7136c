"""RecordEpisodes: fit on CartPole writes playable mp4s of evaluation episodes and a video in TensorBoard."""

import io

import imageio_ffmpeg
import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from rl_lightning import PPO, EnvConfig, RecurrentPPO
from rl_lightning.callbacks import RecordEpisodes
from rl_lightning.callbacks.video import GifFrames, record_episode, sample_frames
from tests.helpers import build, quick_trainer


@pytest.fixture(autouse=True)
def _headless(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # quiets SDL's warning when pygame renders
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")


def test_fit_records_playable_videos_and_tensorboard(tmp_path):
    L.seed_everything(0)
    model = build(
        PPO,
        env=EnvConfig("CartPole-v1", num_envs=4),
        total_env_steps=4 * 512,
        env_steps_per_epoch=512,  # 4 evaluations
        num_steps=64,
        eval_episodes=1,  # so val/episode_length is the length of the recorded episode
    )
    videos = RecordEpisodes(every_n_evals=2)  # evaluations 1 and 3, and 4 as the last
    lengths = []

    class EvalLengths(L.Callback):
        def on_validation_end(self, trainer, pl_module):
            lengths.append(int(trainer.callback_metrics["val/episode_length"]))

    logger = TensorBoardLogger(tmp_path, name="run")
    quick_trainer(logger=logger, callbacks=[videos, EvalLengths()]).fit(model)

    assert [p.name.split("-return")[0] for p in videos.videos] == [
        "eval-env_steps=512",
        "eval-env_steps=1536",
        "eval-env_steps=2048",
    ]
    for path, length in zip(videos.videos, [lengths[0], lengths[2], lengths[3]], strict=True):
        assert path.parent == tmp_path / "run/version_0/videos" and path.stat().st_size > 1000
        frames, _ = imageio_ffmpeg.count_frames_and_secs(str(path))  # decodes the whole file with ffmpeg
        assert frames == length + 1  # the first state and the state after every step
        reader = imageio_ffmpeg.read_frames(str(path))
        meta = next(reader)
        assert meta["size"] == (600, 400) and meta["fps"] == 50  # CartPole's render size and render_fps
        first = next(reader)
        assert len(first) == 600 * 400 * 3 and max(first) > 0
        reader.close()
        assert path.name.endswith(f"-return={length}.mp4")  # CartPole: return = length

    strip = sample_frames(videos.videos[-1], n=4)
    assert [i for i, _ in strip][::3] == [0, lengths[3]] and len(strip) == 4
    assert all(frame.shape == (400, 600, 3) for _, frame in strip)

    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0})
    events.Reload()
    assert "val/video" in events.Tags()["images"]
    tb = events.Images("val/video")
    assert [e.step for e in tb] == [512, 1536, 2048]
    gif = Image.open(io.BytesIO(tb[-1].encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames > 1 and (gif.width, gif.height) == (240, 160)
    assert gif_duration_ms(gif) == 20 * (lengths[3] + 1)  # in real time: 50 fps (Pillow merges equal frames)


def gif_duration_ms(gif: Image.Image) -> int:
    total = 0
    for i in range(gif.n_frames):
        gif.seek(i)
        total += gif.info["duration"]
    return total


def test_gif_frames_stay_bounded_and_keep_the_duration():

    gif = GifFrames(max_width=60, max_frames=10)
    for i in range(45):
        gif.add(np.full((40, 120, 3), i, dtype=np.uint8))
    assert gif.stride == 8 and len(gif.images) == 6  # frames 0, 8, ..., 40
    assert [im.getpixel((0, 0))[0] for im in gif.images] == [0, 8, 16, 24, 32, 40]
    image = Image.open(io.BytesIO(gif.encode(fps=50)))
    assert image.size == (60, 20) and image.n_frames == 6 and image.info["duration"] == 160  # 8 frames at 50 fps


def test_each_recorded_episode_of_a_recurrent_policy_starts_from_its_first_memory():
    model = build(RecurrentPPO, env=EnvConfig("CartPole-v1"), hidden_size=8)
    model.build_for_env()
    first_memories = []
    act = model.act_with_memory

    def spy(obs, memory, deterministic=True):
        first_memories.append(memory.clone())
        return act(obs, memory, deterministic)

    model.act_with_memory = spy
    episodes = [record_episode(model, seed=3, max_steps=20) for _ in range(2)]
    starts = [first_memories[0], first_memories[len(episodes[0].frames) - 1]]  # the first step of each episode
    assert all(torch.equal(m, torch.zeros_like(m)) for m in starts)
    assert not torch.equal(first_memories[1], torch.zeros_like(first_memories[1]))  # carried within an episode
    assert episodes[0].episode_return == episodes[1].episode_return
    assert np.array_equal(episodes[0].frames, episodes[1].frames)
