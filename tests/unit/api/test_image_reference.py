"""Image strings are validated by the CRD (a pattern) and by the model, with the field named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from kyai.api import WorkloadSpec
from kyai.api._base import IMAGE_REFERENCE
from kyai.settings import DEFAULT_ENGINE_IMAGES, DEFAULT_WORKER_IMAGE

CRDS = Path(__file__).resolve().parents[3] / "crds"

GOOD = [
    "vllm/vllm-openai:v0.8.5",
    "ghcr.io/kyai-io/kyai-operator:0.1.0",
    "localhost:5000/team/engine:1",
    "registry.local/vllm",
    "kyai:dev",
    "docker.io/library/python@sha256:" + "a" * 64,
    "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3@sha256:" + "0" * 64,
    "my-registry-1.example.com:443/a__b/c-d.e:Tag_1.2-x",
]
BAD = [
    "https://ghcr.io/x/y:1",  # a URL, not a reference
    "Vllm/Engine:1",  # upper-case repository
    "vllm openai:1",  # a space
    "vllm:",  # empty tag
    "x/y:" + "t" * 129,  # tag too long
    "ghcr.io/x/y@sha256:abc",  # short digest
    "-leading/dash:1",
    "x//y:1",
]


@pytest.mark.parametrize("image", GOOD)
def test_good_references_pass(image: str) -> None:
    assert re.match(IMAGE_REFERENCE, image)
    WorkloadSpec.model_validate({"framework": "vllm", "model": "m", "image": image})


@pytest.mark.parametrize("image", BAD)
def test_bad_references_are_refused_naming_the_field(image: str) -> None:
    assert not re.match(IMAGE_REFERENCE, image)
    with pytest.raises(ValidationError) as caught:
        WorkloadSpec.model_validate({"framework": "vllm", "model": "m", "image": image})
    assert caught.value.errors()[0]["loc"] == ("image",)


def test_the_defaults_match_and_the_crd_carries_the_pattern() -> None:
    for image in [*DEFAULT_ENGINE_IMAGES.values(), DEFAULT_WORKER_IMAGE]:
        assert re.match(IMAGE_REFERENCE, image), image
    crd = yaml.safe_load((CRDS / "workloads.kyai.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    image = schema["properties"]["spec"]["properties"]["image"]
    assert image["pattern"] == IMAGE_REFERENCE and image["maxLength"] == 512
