"""Shared test settings and fixtures.

Hypothesis is derandomized under CI and never timed. ``s3_server``: a real
S3 server (moto's standalone server) on 127.0.0.1, one per test session.
"""

import logging
import os
import types
import urllib.request

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

S3_BUCKET = "exactbatch-test"


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
