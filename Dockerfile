# rl-lightning with CUDA, Atari, MuJoCo and video recording. See README.md, "Docker":
#   docker build -t rl-lightning .                                  # training image (entry point: rl-lightning)
#   docker build --target jupyter -t rl-lightning:jupyter .         # the same plus JupyterLab on port 8888
#   docker run --gpus all -v "$PWD/logs:/workspace/logs" -v "$PWD/checkpoints:/workspace/checkpoints" \
#       rl-lightning fit --config configs/ppo/cartpole.yaml --config configs/trainer/gpu.yaml \
#       --config configs/trainer/docker.yaml
#
# torch comes from the PyTorch index of the CUDA version of the base image (CUDA 13.0, the default CUDA of
# the torch wheels on PyPI), so the container's CUDA and torch's agree; the host needs an NVIDIA driver
# for CUDA 13 and the NVIDIA Container Toolkit (`--gpus all`). Without a GPU the image runs on CPU.
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04

FROM ${CUDA_IMAGE} AS base
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ARG TORCH_SPEC="torch>=2.4"
ARG UID=1000
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    MUJOCO_GL=egl \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Python (3.12 on Ubuntu 24.04) and the EGL/GL libraries MuJoCo renders video frames with, headless.
# Not pinned (DL3008): Ubuntu replaces package versions with security updates, pins would break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv libegl1 libgl1 libglvnd0 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/rl-lightning
COPY pyproject.toml README.md ./
COPY rl_lightning ./rl_lightning
# torch's version is a build argument, which DL3013 cannot see; the other versions come from pyproject.toml.
# hadolint ignore=DL3013
RUN python3 -m venv "$VIRTUAL_ENV" \
    && pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC" \
    && pip install --no-cache-dir ".[atari,mujoco,video]" \
    && rl-lightning --help > /dev/null

# A non-root user owning the working directory and the two volumes (created before VOLUME so that new
# named volumes start with this owner). Ubuntu 24.04 images come with a user "ubuntu" holding uid 1000.
RUN (userdel --remove ubuntu || true) \
    && useradd --create-home --uid "$UID" --shell /bin/bash rl \
    && mkdir -p /workspace/logs /workspace/checkpoints \
    && chown -R rl:rl /workspace
COPY --chown=rl:rl configs /workspace/configs
WORKDIR /workspace
USER ${UID}
VOLUME ["/workspace/logs", "/workspace/checkpoints"]

# JupyterLab variant: docker build --target jupyter -t rl-lightning:jupyter .
#   docker run --gpus all -p 8888:8888 -v "$PWD/notebooks:/workspace/notebooks" rl-lightning:jupyter
# then open the http://127.0.0.1:8888/lab?token=... address it prints.
FROM base AS jupyter
RUN pip install --no-cache-dir "/opt/rl-lightning[notebooks]"
EXPOSE 8888
ENTRYPOINT ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser", "--notebook-dir=/workspace"]

# The default target (last stage): the rl-lightning command line.
FROM base AS runtime
ENTRYPOINT ["rl-lightning"]
CMD ["--help"]
