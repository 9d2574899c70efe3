"""docs/from-torchserve.md, worked against the REAL TorchServe, Triton and KServe: the image
classifier TorchServe serves (``image.mar``), unzipped and moved to Triton's Python backend and
to a KServe model server with the page's files (quoted whole on the page), answers
TorchServe's clients, unchanged behind the gateway (the page's curl commands but for the
address) and its gRPC ``Predictions``: one upload at a time (PNG or JPEG, raw ``curl -T`` or
multipart ``curl -F``) with the very bytes TorchServe's own ``/predictions`` sent for the same
picture, the same forward over a batch of one; eight at once in batches with the same classes
in the same order, each probability within `IMAGE_ULPS` of TorchServe's, in TorchServe's
format (a forward over a batch is not bit-equal to forwards over its rows on every CPU; what
this CPU's kernels do is measured beside, at one thread and at the default); and a file that
is no image fails alone."""
from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import tomllib
import zipfile
from collections.abc import Iterator

import grpc
import pytest

from gateway import config
from tests.harness import http, running_gateway
from tests.predictors import images
from tests.predictors.harness import PredictorProcess, TorchServeServer, http_ok
from tests.predictors.torchserve_clients import CURL_ENV, IMAGE_ULPS, assert_same_top5, curl_command, float32_ulps
from tests.processes import ROOT
from tests.readme import block_after, commands_after
from tools import demo
from tools.predictor_envs import ensure_env
from tools.processes import free_port
from wire.generated.torchserve import inference_pb2 as ts_pb
from wire.generated.torchserve import inference_pb2_grpc as ts_grpc

GUIDE = "docs/from-torchserve.md"
FILES = ROOT / "tests" / "predictors" / "from_torchserve"
PICTURES = {"kitten.png": images.png(1), "kitten.jpg": images.jpeg(2, size=(320, 240))}
# The gateway's names for the two moved models (the page names each "image", one at a time).
MOVED = {"triton": "image", "kserve": "image_kserve"}


def curl_bytes(command: str, cwd: pathlib.Path) -> tuple[int, bytes]:
    """A curl command line as the page writes it; (status, the body exactly as printed)."""
    done = subprocess.run(curl_command(*shlex.split(command)[1:]), capture_output=True, cwd=cwd, env=CURL_ENV,
                          timeout=60, check=True)
    body, _, status = done.stdout.rpartition(b"\n")
    return int(status), body


def curl_at_once(commands: list[str], cwd: pathlib.Path) -> list[tuple[int, bytes]]:
    """Every curl started before any is waited for: concurrent clients."""
    running = [subprocess.Popen(curl_command(*shlex.split(c)[1:]), stdout=subprocess.PIPE, cwd=cwd, env=CURL_ENV)
               for c in commands]
    answers = []
    for proc in running:
        body, _, status = proc.communicate(timeout=60)[0].rpartition(b"\n")
        answers.append((int(status), body))
    return answers


@pytest.fixture(scope="module")
def pictures(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    folder = tmp_path_factory.mktemp("pictures")
    for name, picture in PICTURES.items():
        (folder / name).write_bytes(picture)
    for seed in range(8):
        (folder / f"picture-{seed}.png").write_bytes(images.png(200 + seed))
    (folder / "notes.txt").write_text("not a picture\n")
    return folder


@pytest.fixture(scope="module")
def before(torchserve_batching_server: TorchServeServer, pictures: pathlib.Path) -> dict[str, bytes]:
    """What TorchServe's own /predictions answered for each picture, one upload at a time (the
    page's "Before" command, its address the server's)."""
    (command,) = commands_after("## Before: the model in TorchServe", GUIDE)
    assert command == "curl http://localhost:8080/predictions/image -T kitten.png"
    answers = {}
    for name in sorted(p.name for p in pictures.iterdir() if p.suffix in (".png", ".jpg")):
        runnable = command.replace("http://localhost:8080", torchserve_batching_server.http_url)
        status, body = curl_bytes(runnable.replace("kitten.png", name), pictures)
        assert status == 200, body
        answers[name] = body
    return answers


@pytest.fixture(scope="module")
def archive(torchserve_batching_server: TorchServeServer) -> pathlib.Path:
    """The ``image.mar`` TorchServe serves (torch-model-archiver's, in the server's store)."""
    return torchserve_batching_server.process.workdir / "store" / "image.mar"


@pytest.fixture(scope="module")
def triton(archive: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Triton on the page's model repository (as `python -m tools.demo` runs it); its gRPC address."""
    workdir = tmp_path_factory.mktemp("triton-image")
    demo.triton_repository(archive, workdir / "models")
    grpc_port = free_port()
    server = demo.triton_process(workdir, free_port(), grpc_port).start()
    try:
        yield f"127.0.0.1:{grpc_port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kserve(archive: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """kserve_image.py on the archive's files (in the KServe venv with torch); its gRPC address."""
    workdir = tmp_path_factory.mktemp("kserve-image")
    with zipfile.ZipFile(archive) as mar:
        mar.extractall(workdir / "models" / "image" / "1")
    (command,) = commands_after("Start it off the gateway's ports", GUIDE)
    http_port, grpc_port = free_port(), free_port()
    args = shlex.split(command.replace("8090", str(http_port)).replace("8091", str(grpc_port)))[2:]
    server = PredictorProcess("kserve-image",
                              [ensure_env("kserve-openai"), FILES / "kserve_loopback.py", *args, "--exit-on-stdin-eof"],
                              workdir, lambda: http_ok(f"http://127.0.0.1:{http_port}/v2/models/image/ready"))
    server.start()
    try:
        yield f"127.0.0.1:{grpc_port}"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gw(triton: str, kserve: str) -> Iterator:
    """One gateway with the page's two configs (the KServe one renamed beside Triton's)."""
    models = []
    for marker, url, name in (("## Step 2a", triton, MOVED["triton"]), ("## Step 2b", kserve, MOVED["kserve"])):
        (model,) = tomllib.loads(block_after(marker, "toml", GUIDE))["models"]
        model.update(url=url, name=name, backend_model="image")
        models.append(model)
    with running_gateway(config.parse({"server": {"http_port": 0, "grpc_port": 0}, "models": models})) as running:
        yield running


def after_commands(gw, model: str, picture: str) -> list[str]:
    """The page's "After" commands, for `model` and `picture`, at the test gateway's address."""
    commands = commands_after("TorchServe's clients do not change", GUIDE)
    assert [c.split()[-2] for c in commands] == ["-T", "-F"]
    return [c.replace("http://localhost:8080", gw.http_url).replace("/predictions/image", f"/predictions/{model}")
            .replace("kitten.png", picture) for c in commands]


def assert_torchserves_answer_batched(body: bytes, alone: bytes) -> None:
    """`body`, answered in a batch, is TorchServe's answer `alone` for its picture but for the
    rounding of a batch's forward: the same classes in the same order, each probability within
    IMAGE_ULPS, printed as TorchServe's worker prints (``json.dumps(row, indent=2)``)."""
    got = json.loads(body)
    assert body == json.dumps(got, indent=2).encode(), body
    assert_same_top5(got, json.loads(alone))


def rows_and_batches(gw, model: str) -> tuple[float, float]:
    """The gateway's own count of the rows and batches it sent `model`'s predictor."""
    status, _, body = http("GET", f"{gw.http_url}/metrics")
    assert status == 200
    found = {}
    for line in body.decode().splitlines():
        for key in ("sum", "count"):
            if line.startswith(f'gateway_batch_size_{key}{{model="{model}"}}'):
                found[key] = float(line.split()[-1])
    return found.get("sum", 0.0), found.get("count", 0.0)


# --- the page ------------------------------------------------------------------------------


def test_the_page_quotes_the_files_that_move_the_model_whole():
    repository = FILES / "model_repository" / "image"
    assert block_after("## Step 2a", "text", GUIDE) == (repository / "config.pbtxt").read_text()
    assert block_after("`models/image/1/model.py` does", "python", GUIDE) == (repository / "1" / "model.py").read_text()
    assert block_after("## Step 2b", "python", GUIDE) == (FILES / "kserve_image.py").read_text()
    assert commands_after("## Step 1", GUIDE) == ["unzip image.mar -d models/image/1"]


def test_the_answer_the_page_shows_is_torchserves_for_the_kitten(before):
    for marker in ("## Try it", "## Before"):
        shown = json.loads(block_after(marker, "json", GUIDE))
        # Printed from a run on another CPU, whose kernels may round otherwise (see IMAGE_ULPS).
        assert_same_top5(shown, json.loads(before["kitten.png"]))


# --- the moved model -----------------------------------------------------------------------


@pytest.mark.parametrize("server", sorted(MOVED))
@pytest.mark.parametrize("picture", sorted(PICTURES))
def test_torchserves_clients_get_the_bytes_torchserve_sent(gw, before, pictures, server, picture):
    for command in after_commands(gw, MOVED[server], picture):
        status, body = curl_bytes(command, pictures)
        assert status == 200, (command, body)
        assert body == before[picture], (command, body, before[picture])


@pytest.mark.parametrize("server", sorted(MOVED))
def test_torchserves_grpc_clients_get_the_bytes_torchserve_sent(gw, before, server):
    with grpc.insecure_channel(gw.grpc_address) as channel:
        stub = ts_grpc.InferenceAPIsServiceStub(channel)
        for name, picture in PICTURES.items():
            answer = stub.Predictions(ts_pb.PredictionsRequest(model_name=MOVED[server], input={"data": picture}),
                                      timeout=30)
            assert answer.prediction == before[name]


@pytest.mark.parametrize("server", sorted(MOVED))
def test_eight_uploads_at_once_are_batched_and_each_gets_its_own_bytes(gw, before, pictures, server):
    names = [f"picture-{seed}.png" for seed in range(8)]
    put = after_commands(gw, MOVED[server], "PICTURE")[0]
    for _ in range(3):  # the uploads may still arrive one by one: try until a batch held several
        rows, batches = rows_and_batches(gw, MOVED[server])
        answers = curl_at_once([put.replace("PICTURE", name) for name in names], pictures)
        assert [status for status, _ in answers] == [200] * 8
        for (_, body), name in zip(answers, names, strict=True):
            assert_torchserves_answer_batched(body, before[name])
        more_rows, more_batches = rows_and_batches(gw, MOVED[server])
        assert more_rows - rows == 8
        if more_batches - batches < 8:
            break
    else:
        pytest.fail("eight concurrent uploads never shared a batch")


@pytest.mark.parametrize("server", sorted(MOVED))
def test_a_file_that_is_no_image_fails_alone(gw, before, pictures, server):
    put = after_commands(gw, MOVED[server], "PICTURE")[0]
    names = [f"picture-{seed}.png" for seed in range(3)] + ["notes.txt"] + [f"picture-{seed}.png" for seed in range(3, 7)]
    answers = curl_at_once([put.replace("PICTURE", name) for name in names], pictures)
    status, body = answers[3]
    assert status == 400 and b"not an image" in body, body
    others = [answer for i, answer in enumerate(answers) if i != 3]
    assert [s for s, _ in others] == [200] * 7
    for (_, body), name in zip(others, [n for n in names if n != "notes.txt"], strict=True):
        assert_torchserves_answer_batched(body, before[name])


@pytest.mark.parametrize("threads", ["1", None], ids=["OMP_NUM_THREADS=1", "default threads"])
def test_on_this_cpu_a_batchs_answers_are_its_rows_alone_within_the_bound(pictures, threads):
    """The claim the batched tests rest on, measured on this CPU by the model's own torch:
    one forward over eight pictures against eight forwards of one, at one thread (as the
    served model runs) and at torch's default."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    folder = pictures / f"eight-{threads}"
    folder.mkdir()
    for seed in range(8):
        (folder / f"picture-{seed}.png").write_bytes((pictures / f"picture-{seed}.png").read_bytes())
    done = subprocess.run([ensure_env("triton"), ROOT / "tests" / "predictors" / "batch_rounding.py", folder],
                          capture_output=True, env=env, timeout=120, check=True)
    measured = json.loads(done.stdout)
    assert threads is None or measured["threads"] == int(threads)
    for batched, alone in zip(measured["batched"], measured["alone"], strict=True):
        assert_same_top5(batched, alone)
    # The bound is not vacuous: two pictures' answers are far apart.
    first, second = measured["alone"][:2]
    assert max(float32_ulps(first.get(label, 0.0), p) for label, p in second.items()) > 100 * IMAGE_ULPS


def test_the_demo_serves_the_page_s_repository(archive, tmp_path):
    """`python -m tools.demo` builds Triton's repository from the page's files and the archive."""
    root = demo.triton_repository(archive, tmp_path / "models")
    assert (root / "image" / "config.pbtxt").read_text() == block_after("## Step 2a", "text", GUIDE)
    assert {"model.py", "tiny_cnn.py", "image.pt", "index_to_name.json"} <= {p.name for p in (root / "image" / "1").iterdir()}
