"""Which image a pod's container runs as, and the image names the devcluster knows.

* the project's image (``--local-image`` patterns: the operator and its workers) runs as
  written: a local process in the ``process`` runtime; in ``podman``, a container of that
  image when podman's store has it, else of the devcluster's project image (``--image``);
* the stand-in image (:data:`DEFAULT_STANDIN_IMAGES`: the LLM double and the engine
  stand-ins of kyai-testing, which the product image does not hold) runs the same way, with
  the devcluster's stand-in image (``--standin-image``) in podman when its store lacks it;
* a serving engine's image (:data:`ENGINE_IMAGES`) runs the engine stand-in
  (:data:`ENGINE_STANDIN_MODULE`), in podman in a container of the stand-in image; an image
  matching one of the plan's ``engine_commands`` patterns runs that command instead, with
  the container's command line after it (``--engine-command 'vllm/vllm-openai*=PYTHON
  LAUNCHER'``: the real ``vllm serve`` of the real-engine tests);
* any other image cannot be pulled (``missing``).

Argparse-free and import-light: ``kyai devcluster``'s parser reads its defaults from here.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_ENTRYPOINT",
    "DEFAULT_LOCAL_IMAGES",
    "DEFAULT_PROJECT_IMAGE",
    "DEFAULT_STANDIN_IMAGE",
    "DEFAULT_STANDIN_IMAGES",
    "ENGINE_IMAGES",
    "ENGINE_STANDIN_MODULE",
    "ImageKind",
    "ImagePlan",
    "parse_engine_command",
]

#: Images that run as the project's image by default.
DEFAULT_LOCAL_IMAGES: tuple[str, ...] = (
    "ghcr.io/kyai-io/kyai-operator",
    "ghcr.io/kyai-io/kyai-operator:*",
    "ghcr.io/kyai-io/kyai-operator@*",
    "kyai-operator",
    "kyai-operator:*",
    "kyai-operator@*",
    "localhost/kyai-operator:*",
)
#: Images of the stand-ins (kyai-testing on top of the project's image).
DEFAULT_STANDIN_IMAGES: tuple[str, ...] = (
    "ghcr.io/kyai-io/kyai-standins",
    "ghcr.io/kyai-io/kyai-standins:*",
    "ghcr.io/kyai-io/kyai-standins@*",
    "kyai-standins",
    "kyai-standins:*",
    "kyai-standins@*",
    "localhost/kyai-standins:*",
)
#: Images of serving engines: their pods run the engine stand-in (fnmatch patterns).
ENGINE_IMAGES: tuple[str, ...] = (
    "vllm/vllm-openai*",
    "docker.io/vllm/vllm-openai*",
    "lmsysorg/sglang*",
    "docker.io/lmsysorg/sglang*",
    "nvcr.io/nvidia/tensorrt-llm/*",
)
#: The module the engine stand-in runs as (``python -m``), with the container's argv.
ENGINE_STANDIN_MODULE = "kyai_testing.engines"
#: The project image the podman runtime runs for local-image patterns (``make image``).
DEFAULT_PROJECT_IMAGE = "localhost/kyai-operator:dev"
#: The stand-in image the podman runtime runs for stand-in patterns and engine images
#: (``make standin-image``).
DEFAULT_STANDIN_IMAGE = "localhost/kyai-standins:dev"
#: What runs when a local-image container has no ``command`` (the image's entrypoint).
DEFAULT_ENTRYPOINT: tuple[str, ...] = ("kyai",)

ImageKind = Literal["local", "engine", "missing"]


def _matches(image: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(image, pattern) for pattern in patterns)


def parse_engine_command(text: str) -> tuple[str, tuple[str, ...]]:
    """``PATTERN=COMMAND`` (``kyai devcluster --engine-command``) as ``(pattern, argv)``.

    The command is split as a shell would (``shlex``). Raises ``ValueError`` when either
    side is empty or the command cannot be split.
    """
    pattern, equals, command = text.partition("=")
    pattern = pattern.strip()
    if not equals or not pattern:
        raise ValueError(f"expected IMAGE_PATTERN=COMMAND, got {text!r}")
    argv = tuple(shlex.split(command))
    if not argv:
        raise ValueError(f"{text!r} names no command after {pattern}=")
    return pattern, argv


@dataclass(frozen=True)
class ImagePlan:
    """How the kubelet runs each image (see the module docstring)."""

    local_images: tuple[str, ...] = DEFAULT_LOCAL_IMAGES
    engine_images: tuple[str, ...] = ENGINE_IMAGES
    standin_images: tuple[str, ...] = DEFAULT_STANDIN_IMAGES
    project_image: str = DEFAULT_PROJECT_IMAGE
    standin_image: str = DEFAULT_STANDIN_IMAGE
    #: ``(pattern, command)`` pairs, first match wins: an engine image matching a pattern
    #: runs that command (then the container's command and args) instead of the stand-in.
    #: Its patterns count as engine images too.
    engine_commands: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def is_local(self, image: str) -> bool:
        """Whether an image is the project's own or the stand-ins' (runs as written)."""
        return _matches(image, self.local_images) or _matches(image, self.standin_images)

    def is_engine(self, image: str) -> bool:
        """Whether an image is a serving engine's (runs the engine stand-in, or its command)."""
        return _matches(image, self.engine_images) or any(
            fnmatch.fnmatchcase(image, pattern) for pattern, _ in self.engine_commands
        )

    def engine_command(self, image: str) -> tuple[str, ...] | None:
        """The command an engine image runs instead of the stand-in (None: the stand-in)."""
        for pattern, command in self.engine_commands:
            if fnmatch.fnmatchcase(image, pattern):
                return command
        return None

    async def plan(
        self, image: str, *, runtime: str, present: Callable[[str], Awaitable[bool]]
    ) -> tuple[ImageKind, str]:
        """``(kind, image to run)`` in ``runtime``; ``present`` asks podman's store."""
        if self.is_engine(image):
            return "engine", self.standin_image
        if runtime == "process":
            return ("local", image) if self.is_local(image) else ("missing", image)
        if await present(image):
            return "local", image
        if _matches(image, self.standin_images):
            return "local", self.standin_image
        if _matches(image, self.local_images):
            return "local", self.project_image
        return "missing", image
