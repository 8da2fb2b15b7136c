"""Videos of the agent: evaluation episodes as mp4 files and as animations in TensorBoard.

Needs the ``video`` extra (``pip install 'rl-lightning[video]'``: imageio-ffmpeg encodes the mp4).

TensorBoard has no video type: ``SummaryWriter.add_video`` stores an animated GIF in an image
summary, which TensorBoard's Images tab plays. ``add_video`` itself silently writes nothing with
moviepy 2 (it imports ``moviepy.editor``, gone in 2.x), so ``add_gif`` writes the same summary with
the GIF encoded by Pillow.

Frames are streamed to the encoders as the episode is played, never all held at full size: a 500-step
CartPole episode is 360 MB of raw 600x400 frames.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from PIL import Image  # a dependency of tensorboard

from rl_lightning.evaluation import eval_seed_base, make_eval_env


@torch.no_grad()
def play_rendered(
    module: Any, envs: gym.vector.VectorEnv, seed: int, max_steps: int, on_frame: Sequence[Callable[[np.ndarray], Any]]
) -> tuple[float, int]:
    """Play one episode of ``module``'s evaluation policy (``act_in_env``) in ``envs`` (its eval env,
    ``make_eval_env``: one sub-env made with ``render_mode="rgb_array"``), passing each rendered frame (uint8
    ``[H, W, 3]``) to every ``on_frame``: the first state and the state after every step, so
    ``length + 1`` frames.

    The sub-env of a ``SyncVectorEnv`` is stepped directly: the vector env would reset it inside the last
    step (SAME_STEP autoreset), before its final state could be rendered. Other vector envs are stepped
    as such, and their final state is missing from the video.

    Returns ``(episode_return, length)``; the episode is cut after ``max_steps`` steps.
    """
    single = envs.envs[0] if isinstance(envs, gym.vector.SyncVectorEnv) else None

    def render() -> None:
        frame = single.render() if single is not None else envs.render()[0]
        for fn in on_frame:
            fn(frame)

    obs = np.asarray(single.reset(seed=seed)[0])[None] if single is not None else envs.reset(seed=[seed])[0]
    module.start_episodes()  # a recurrent policy starts from its first memory
    render()
    episode_return, length, done = 0.0, 0, False
    while not done and length < max_steps:
        actions = module.act_in_env(torch.as_tensor(obs, device=module.device)).cpu().numpy()
        if single is not None:
            obs, reward, terminated, truncated, _ = single.step(actions[0])
            obs = np.asarray(obs)[None]
        else:
            obs, rewards, terminations, truncations, _ = envs.step(actions)
            reward, terminated, truncated = rewards[0], terminations[0], truncations[0]
        episode_return += float(reward)
        length += 1
        done = bool(terminated or truncated)
        if single is not None or not done:
            render()
    return episode_return, length


class Episode(NamedTuple):
    """A rendered episode: ``frames`` is uint8 ``[T, H, W, 3]``, the first state and the state after every
    step (``T`` = episode length + 1; see ``play_rendered``)."""

    frames: np.ndarray
    episode_return: float
    fps: int


def record_episode(module: Any, seed: int = 0, max_steps: int = 1_000) -> Episode:
    """Play and render one deterministic episode of ``module`` (an ``RLModule``) in its evaluation env,
    keeping every frame in memory (mind ``max_steps`` with large frames)."""
    envs = make_eval_env(module.env_config, 1, render_mode="rgb_array")
    try:
        frames: list[np.ndarray] = []
        episode_return, _ = play_rendered(module, envs, seed, max_steps, [frames.append])
        return Episode(np.stack(frames), episode_return, _fps(envs))
    finally:
        envs.close()


def _fps(envs: gym.vector.VectorEnv) -> int:
    return int(envs.metadata.get("render_fps") or 30)


class Mp4Writer:
    """Streams uint8 ``[H, W, 3]`` frames into an H.264 mp4 (yuv420p: plays in browsers and players)."""

    def __init__(self, path: str | Path, fps: int) -> None:
        self.path, self.fps, self.frames = Path(path), fps, 0
        self._writer: Any = None

    def add(self, frame: np.ndarray) -> None:
        h, w = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2  # yuv420p needs even sizes
        if self._writer is None:
            import imageio_ffmpeg  # the `video` extra

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = imageio_ffmpeg.write_frames(
                str(self.path), (w, h), fps=self.fps, codec="libx264", pix_fmt_out="yuv420p", macro_block_size=1
            )
            self._writer.send(None)  # starts ffmpeg
        self._writer.send(np.ascontiguousarray(frame[:h, :w]))
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class GifFrames:
    """Keeps a small copy of a stream of frames for a GIF: scaled down to ``max_width`` and thinned to at
    most ``max_frames`` (every 2nd, 4th, ... frame once there are more; the GIF then plays them slower,
    so it lasts as long as the episode)."""

    def __init__(self, max_width: int = 240, max_frames: int = 250) -> None:
        self.max_width, self.max_frames = max_width, max_frames
        self.images: list[Image.Image] = []
        self.stride, self.seen = 1, 0

    def add(self, frame: np.ndarray) -> None:
        if self.seen % self.stride == 0:
            image = Image.fromarray(frame)
            if image.width > self.max_width:
                height = max(1, round(image.height * self.max_width / image.width))
                image = image.resize((self.max_width, height), Image.BILINEAR)
            self.images.append(image)
            if len(self.images) > self.max_frames:
                self.images, self.stride = self.images[::2], self.stride * 2
        self.seen += 1

    def encode(self, fps: int) -> bytes:
        # One palette for all frames, from up to 8 of them: 4x faster than a palette per frame.
        sample = self.images[:: max(1, len(self.images) // 8)][:8]
        strip = Image.new("RGB", (sum(im.width for im in sample), sample[0].height))
        for i, im in enumerate(sample):
            strip.paste(im, (i * im.width, 0))
        palette = strip.quantize(colors=255)
        first, *rest = [im.quantize(palette=palette, dither=Image.Dither.NONE) for im in self.images]
        duration_ms = max(20, round(1000 * self.stride / fps))  # browsers show a GIF frame >= 20 ms
        buffer = io.BytesIO()
        first.save(buffer, format="GIF", save_all=True, append_images=rest, duration=duration_ms, loop=0)
        return buffer.getvalue()


def sample_frames(path: str | Path, n: int = 6) -> list[tuple[int, np.ndarray]]:
    """``n`` frames spread evenly over an mp4 (first and last included) as ``(index, [H, W, 3] uint8)``,
    decoded one at a time: a filmstrip of a recorded episode, e.g. for a notebook."""
    import imageio_ffmpeg  # the `video` extra

    total, _ = imageio_ffmpeg.count_frames_and_secs(str(path))
    wanted = set(np.linspace(0, total - 1, min(n, total)).round().astype(int).tolist())
    reader = imageio_ffmpeg.read_frames(str(path))
    width, height = next(reader)["size"]
    frames = [
        (i, np.frombuffer(buf, np.uint8).reshape(height, width, 3)) for i, buf in enumerate(reader) if i in wanted
    ]
    reader.close()
    return frames


def add_gif(writer: Any, tag: str, gif: bytes, step: int) -> None:
    """Write an animated GIF as TensorBoard's video summary (the summary ``SummaryWriter.add_video`` writes)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    width, height = Image.open(io.BytesIO(gif)).size
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), step)
    writer.flush()


class RecordEpisodes(L.Callback):
    """Videos of evaluation episodes, as mp4 files and in TensorBoard.

    Records at the first evaluation, every ``every_n_evals`` evaluations after it, and at the end of
    training. The recorded episode is evaluation episode 0 replayed with rendering on (same seed, deterministic
    policy), so it shows what the evaluation measured. It goes to
    ``<log_dir>/videos/eval-env_steps=<N>-return=<R>.mp4`` and, with a TensorBoard logger, to the
    ``val/video`` tag (Images tab; step = env steps). Only rank 0 records; the other ranks do not wait.

    On from a config (``trainer.callbacks``) or the command line::

        rl-lightning fit --config configs/ppo/cartpole.yaml \\
            --trainer.callbacks+=rl_lightning.callbacks.RecordEpisodes --trainer.callbacks.every_n_evals=5

    Args:
        every_n_evals: Record at evaluations 1, 1 + n, 1 + 2n, ... (and at the last one of a ``fit``).
        mp4: Write an mp4 file under the run's log dir.
        tensorboard: Add the video (an animated GIF, at most 240 pixels wide) to the TensorBoard logger.
        max_steps: Stop recording an episode after this many steps.
        fps: Frames per second of the videos; ``None`` plays at the env's own speed (``render_fps``).
    """

    def __init__(
        self,
        every_n_evals: int = 1,
        mp4: bool = True,
        tensorboard: bool = True,
        max_steps: int = 2_000,
        fps: int | None = None,
    ) -> None:
        if every_n_evals < 1:
            raise ValueError(f"every_n_evals must be >= 1, got {every_n_evals}.")
        self.every_n_evals = every_n_evals
        self.mp4 = mp4
        self.tensorboard = tensorboard
        self.max_steps = max_steps
        self.fps = fps
        self.evaluations = 0
        self.videos: list[Path] = []  # the mp4 files written, oldest first

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.evaluations += 1
        last = trainer.state.fn == "fit" and pl_module.env_steps >= pl_module.total_env_steps
        if trainer.is_global_zero and ((self.evaluations - 1) % self.every_n_evals == 0 or last):
            self.record(trainer, pl_module)

    def record(self, trainer: L.Trainer, pl_module: Any) -> None:
        step = int(pl_module.env_steps)
        videos = Path(trainer.log_dir or trainer.default_root_dir) / "videos"
        tensorboards = [lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        was_training = pl_module.training
        pl_module.eval()
        envs = make_eval_env(pl_module.env_config, 1, render_mode="rgb_array")
        fps = self.fps or _fps(envs)
        mp4 = Mp4Writer(videos / f"recording-env_steps={step}.mp4", fps)  # renamed once the return is known
        gif = GifFrames()
        sinks = ([mp4.add] if self.mp4 else []) + ([gif.add] if self.tensorboard and tensorboards else [])
        try:
            episode_return, _ = play_rendered(
                pl_module, envs, eval_seed_base(pl_module.env_config), self.max_steps, sinks
            )
        finally:
            mp4.close()
            envs.close()
            pl_module.train(was_training)
        if self.mp4:
            path = mp4.path.replace(videos / f"eval-env_steps={step}-return={episode_return:g}.mp4")
            self.videos.append(path)
        if gif.images:
            encoded = gif.encode(fps)
            for writer in tensorboards:
                add_gif(writer, "val/video", encoded, step)

    def state_dict(self) -> dict[str, Any]:
        return {"evaluations": self.evaluations}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.evaluations = int(state_dict.get("evaluations", 0))
