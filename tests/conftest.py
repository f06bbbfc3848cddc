"""Shared test settings and fixtures.

Hypothesis is derandomized under CI and never timed. ``s3_server``: a real
S3 server (moto's standalone server) on 127.0.0.1, one per test session.
"""

import gc
import logging
import os
import signal
import sys
import types
import urllib.request

import backends
import pytest
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Under `make mutants` (mutmut runs pytest in its own process): a mutant's failing example
# is not shrunk. The verdict is the same (the test fails on the example it finds), but
# shrinking could outlast mutmut's CPU-time limit and be counted a timeout, at ten times
# the tests' time.
settings.register_profile(
    "mutants", settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
settings.load_profile(
    "mutants"
    if "mutmut" in sys.modules
    else "ci"
    if os.environ.get("CI")
    else os.environ.get("HYPOTHESIS_PROFILE", "dev")
)

S3_BUCKET = "exactbatch-test"


def pytest_configure(config):
    """Under `make mutants` (tests/mutants.py: mutmut runs pytest in its own process),
    mutmut's trampolines wrap the package's functions: the warnings of exactbatch.audit
    skip their frames as they skip the package's, so that where a warning points is
    tested on every mutant too."""
    mutmut = sys.modules.get("mutmut")
    if mutmut is not None:
        from exactbatch import audit

        prefix = os.path.dirname(os.path.abspath(mutmut.__file__)) + os.sep
        if prefix not in audit.SKIP_FILE_PREFIXES:
            audit.SKIP_FILE_PREFIXES += (prefix,)


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 (a free port), spoken to over HTTP by s3fs.

    Yields a namespace: ``fs`` (the s3fs instance ``open_ndf(url)`` uses),
    ``so`` (storage_options), ``endpoint`` and ``bucket`` (created, empty at
    first; each module writes under keys of its own). Skipped without s3fs
    or moto.
    """
    s3fs = pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    from exactbatch import urls

    mp = pytest.MonkeyPatch()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for k, v in env.items():
        mp.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        mp.delenv(k, raising=False)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        so = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}
        fs, _ = urls.url_to_fs(f"s3://{S3_BUCKET}", so)  # the instance open_ndf(url) will use
        # moto's backends live as long as the process: a second session in one process
        # (make mutants runs pytest several times) would find the last one's bucket
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
        fs.mkdir(S3_BUCKET)
        yield types.SimpleNamespace(fs=fs, so=so, endpoint=endpoint, bucket=S3_BUCKET)
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
        mp.undo()


@pytest.fixture(scope="session", autouse=True)
def backend_of_this_process():
    """The backend the process runs on is the one its environment asks for (the pure
    path under ``EXACTBATCH_PURE=1`` or without the compiled core), and every reader
    gets that backend's kernel (tests/backends.py)."""
    name = backends.expected_backend()
    backends.check_readers(name)
    return name


@pytest.fixture(scope="session", autouse=True)
def sigint_delivered():
    """Ctrl-C reaches the tests as KeyboardInterrupt even when pytest was started with
    SIGINT ignored (in the background: ``&``, nohup, some CI runners), as the tests of
    an interrupted write need it (they would fail falsely); set back at the end."""
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_report_header(config):
    from exactbatch import backend

    return f"exactbatch backend: {backend()}"


@pytest.fixture
def numpy_backend():
    """Readers made in this test use the pure NumPy path (exactbatch.kernels), whatever
    the process's backend (checked: tests/backends.py): for tests of that path's own
    mechanics (positional reads, the read lease)."""
    with backends.on_backend("numpy"):
        yield


@pytest.fixture(params=["compiled", "numpy"])
def each_backend(request):
    """The test runs once per backend (checked: tests/backends.py; the compiled one
    skipped where not built)."""
    if request.param == "compiled" and not backends.built():
        pytest.skip("the compiled core is not built")
    with backends.on_backend(request.param):
        yield request.param


# Test modules that import JAX, which starts threads that a later os.fork() in the
# same process could deadlock on (JAX warns so): they run after every other test.
_JAX_MODULES = ("test_jax.py", "test_numpyro.py", "test_readme.py")


def pytest_collection_modifyitems(config, items):
    """Run the JAX modules last, so the tests that fork do so before JAX is loaded (in
    every worker too under `make test`: xdist's --dist load keeps this order).

    Under `make mutants`, each module's tests together too, in the order they are
    written: mutmut 3 names a mutant's tests (and its clean run's: every test of the
    target) one by one, in a set's order, so pytest ran them interleaved across
    modules, and a module-scoped fixture was torn down and set up again at each
    switch - the cluster target's Ray instance and Dask LocalCluster (about 30 s
    each under load) eleven times in one clean run (5.5 minutes), each start a
    chance for Ray's startup limit to pass (tests/adapters/test_ray.py), and each
    mutant as slow."""
    if "mutmut" in sys.modules:
        items.sort(key=_written_order)  # stable: a function's parameters kept in order
    items.sort(key=lambda item: item.path.name in _JAX_MODULES)  # stable: order kept


def _written_order(item):
    """A test's place in its module as written: the module's path, then the line."""
    where = item.location[1]
    return (str(item.path), -1 if where is None else where)


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """Before each test module: what the modules before it left alive (the libraries
    they imported - torch, JAX, PyMC, Dask - their caches, the suite's own objects) is
    collected once and frozen (gc.freeze), so the collector leaves it out from then
    on. A ``gc.collect()`` in a test (the lifetime and memory tests call it per batch)
    then walks what this module made, not everything the suite ever imported: in a
    process with those libraries loaded a full collection takes half a second.
    A collection frees no less of what a test made."""
    gc.collect()
    gc.freeze()
