"""A real S3-compatible server for the tests: moto's server mode, in its own process on loopback.

``S3Server`` starts ``python -m moto.server`` on 127.0.0.1 and a free port, and points
moxlite at it through the environment a ModelArts job would have (``S3_ENDPOINT``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``), so subprocesses see it too.

Credentials: moto accepts any key until its IAM check is switched on. ``checking_credentials()``
creates an IAM user with an access key allowed ``s3:*``, switches the check on (moto's
``/moto-api/reset-auth``), and switches it off again on exit. moto's signature check
rejects listings whose prefix holds a '/', so only whole-object requests are made
while it is on.
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

REGION = "us-east-1"


def free_port():
    """A loopback port nothing listens on (closed again before it is returned)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class S3Server:
    """moto's S3 server on loopback, with the environment pointing at it while active."""

    def __init__(self, startup_seconds=60):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.startup_seconds = startup_seconds
        self.process = None
        self._saved_environment = {}
        self._clients = {}

    def start(self):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.startup_seconds
        while True:
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=2).read()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto server did not start on {self.url}")
                time.sleep(0.1)
        self.set_environment(S3_ENDPOINT=self.url, AWS_ACCESS_KEY_ID="testing",
                             AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=REGION)
        return self

    def set_environment(self, **values):
        for name, value in values.items():
            self._saved_environment.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def stop(self):
        for name, value in self._saved_environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_environment = {}
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def client(self, service="s3", key="testing", secret="testing"):
        cache_key = (service, key, secret)
        if cache_key not in self._clients:
            self._clients[cache_key] = self._new_client(service, key, secret)
        return self._clients[cache_key]

    def _new_client(self, service, key, secret):
        import boto3

        return boto3.client(service, endpoint_url=self.url, region_name=REGION,
                            aws_access_key_id=key, aws_secret_access_key=secret)

    def new_bucket(self, prefix="bucket"):
        """Create a fresh bucket and return its name."""
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self.client().create_bucket(Bucket=name)
        return name

    def _set_auth_count(self, count):
        request = urllib.request.Request(self.url + "/moto-api/reset-auth", data=str(count).encode(),
                                         method="POST", headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(request, timeout=10).read()

    @contextlib.contextmanager
    def checking_credentials(self):
        """Yields (access key id, secret) of a user the server accepts; all others are refused."""
        iam = self.client("iam")
        user = f"user-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=user)
        key = iam.create_access_key(UserName=user)["AccessKey"]
        iam.put_user_policy(UserName=user, PolicyName="s3-all", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        self._set_auth_count(0)
        try:
            yield key["AccessKeyId"], key["SecretAccessKey"]
        finally:
            self._set_auth_count("inf")


@pytest.fixture(scope="module")
def s3():
    """The server for one test module (import this name into the module to use it)."""
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()
