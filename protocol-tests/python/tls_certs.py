"""Test certificates made with the openssl command: a CA, a broker certificate it signs
for localhost and 127.0.0.1, and a client certificate naming a user. Both sides trust the CA."""

import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(dir: Path, client_cn: str) -> dict[str, Path]:
    """Writes ca.pem, server.pem/.key and client.pem/.key (CN=`client_cn`) into `dir`;
    returns their paths."""
    dir.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=Weir test CA", "-keyout", "ca.key", "-out", "ca.pem",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=dir,
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "server.key", "-out", "server.csr",
        cwd=dir,
    )
    (dir / "server.ext").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem",
        cwd=dir,
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={client_cn}",
        "-keyout", "client.key", "-out", "client.csr",
        cwd=dir,
    )
    (dir / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "client.ext", "-out", "client.pem",
        cwd=dir,
    )
    return {name: dir / name for name in
            ["ca.pem", "server.pem", "server.key", "client.pem", "client.key"]}
