"""Interoperability: curl, a real client, through the proxy by its environment variables.

curl is a test dependency here (the Linux bridge's end-to-end test needs it too); a host
without it fails these tests rather than skipping them.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from typing import TYPE_CHECKING

import pytest

from panday_core.egress.standalone import proxy_environment

if TYPE_CHECKING:
    import pathlib

    from conftest import Env, ProxyHandle

ALLOWED = "allowed.test"


def _curl(
    handle: ProxyHandle, *args: str, use_env: bool = True
) -> subprocess.CompletedProcess[str]:
    curl = shutil.which("curl")
    if curl is None:
        pytest.fail("curl is not installed; it is needed to test the proxy with a real client")
    env = {"PATH": "/usr/bin:/bin"}
    if use_env:
        env |= proxy_environment(handle.proxy.url(), handle.proxy.url(scheme="socks5h"))
    return subprocess.run(
        [curl, "-sS", "--max-time", "20", "-D", "-", *args],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


@pytest.fixture
def tls_context(tmp_path: pathlib.Path) -> tuple[ssl.SSLContext, str]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=tls.test",
         "-addext", "subjectAltName=DNS:tls.test"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx, str(cert)


def test_curl_http_https_and_socks5_through_the_proxy(
    env: Env, tls_context: tuple[ssl.SSLContext, str]
) -> None:
    ctx, cert = tls_context
    up = env.upstream("up")
    tls = env.upstream("tls-up", tls=ctx)
    table = {ALLOWED: ["127.0.0.1"], "tls.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}
    handle = env.proxy(
        allow=[ALLOWED, "tls.test", "127.0.0.1"], ports=[up.port, tls.port], table=table
    )

    plain = _curl(handle, f"http://{ALLOWED}:{up.port}/")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.endswith("hello from up\n")

    https = _curl(handle, "--cacert", cert, f"https://tls.test:{tls.port}/")
    assert https.returncode == 0, https.stderr
    assert "HTTP/1.1 200 Connection established" in https.stdout
    assert https.stdout.endswith("hello from tls-up\n")

    socks = _curl(
        handle,
        "-x",
        handle.proxy.url(scheme="socks5h"),
        f"http://{ALLOWED}:{up.port}/",
        use_env=False,
    )
    assert socks.returncode == 0, socks.stderr
    assert socks.stdout.endswith("hello from up\n")

    refused = _curl(handle, f"http://other.test:{up.port}/")
    assert refused.returncode == 0
    assert refused.stdout.startswith("HTTP/1.1 403 Forbidden")
    assert "X-Panday-Refused: other.test is not in net.allow" in refused.stdout

    refused_tls = _curl(handle, "--cacert", cert, f"https://other.test:{tls.port}/")
    assert refused_tls.returncode != 0
    assert "X-Panday-Refused: other.test is not in net.allow" in refused_tls.stdout

    events = env.wait_events(handle, 5)
    assert [(e.protocol, e.verdict) for e in events] == [
        ("http", "allowed"), ("http-connect", "allowed"), ("socks5", "allowed"),
        ("http", "refused"), ("http-connect", "refused"),
    ]  # fmt: skip
    assert up.connections == 2
    assert tls.connections == 1


def test_curl_without_credentials_gets_407(env: Env) -> None:
    up = env.upstream("up")
    handle = env.proxy(
        allow=[ALLOWED, "127.0.0.1"], ports=[up.port], table={ALLOWED: ["127.0.0.1"]}
    )
    url = handle.proxy.url()
    bare = "http://" + url.rpartition("@")[2]
    result = _curl(handle, "-x", bare, f"http://{ALLOWED}:{up.port}/", use_env=False)
    assert result.stdout.startswith("HTTP/1.1 407 Proxy Authentication Required")
    assert up.connections == 0
