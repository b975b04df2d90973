"""What a user sees first: moxlite's own lines, not TensorFlow's C++ start-up log.

The ``moxlite-run`` tests run the command in a fresh process, because TensorFlow
prints its start-up log once per process, while its shared libraries load.
"""

import logging
import os
import subprocess
import sys

import pytest

import moxlite as mox
from moxlite import logs
from tests import runlib
from tests import ROOT as REPO

QUICK_START = os.path.join(REPO, "recipes", "mnist_mlp.yaml")


def _environment(level):
    """This process's environment with TF_CPP_MIN_LOG_LEVEL unset (None) or set to ``level``."""
    environment = dict(os.environ, PYTHONUNBUFFERED="1",
                       PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)   # conftest sets it for the test process
    if level is not None:
        environment["TF_CPP_MIN_LOG_LEVEL"] = level
    return environment


def _moxlite_run(tmp_path, level):
    """``python -m moxlite`` on a two-step quick start; stdout and stderr as one stream of lines."""
    command = [sys.executable, "-m", "moxlite", QUICK_START, "--set", f"run.log_dir={tmp_path / 'run'}",
               "--set", "run.steps=2", "--set", "run.evaluate=false", "--set", "model.mlp.hidden_units=[8]"]
    finished = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=_environment(level), timeout=300, cwd=str(tmp_path))
    assert finished.returncode == 0, finished.stdout[-3000:]
    return finished.stdout.splitlines()


@pytest.fixture(scope="module")
def tensorflow_import_lines():
    """What a bare ``import tensorflow`` prints with TF_CPP_MIN_LOG_LEVEL unset: the reference for
    what is kept off and what a user who asks for TensorFlow's log sees. One process for both
    tests below: unset is TensorFlow's level 0 (its documented default), the level the second
    test sets."""
    finished = subprocess.run([sys.executable, "-c", "import tensorflow"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=_environment(None), timeout=300)
    assert finished.returncode == 0, finished.stdout[-3000:]
    return [line for line in finished.stdout.splitlines() if line.strip()]


def test_moxlite_run_prints_its_own_line_first_when_the_user_set_no_level(tmp_path, tensorflow_import_lines):
    tensorflow_alone = tensorflow_import_lines
    assert tensorflow_alone, "TensorFlow printed no start-up log here, so there is nothing to keep off"
    lines = _moxlite_run(tmp_path, None)
    assert lines[0].startswith("INFO:moxlite:Training: 1 replica(s)"), lines[:12]
    assert not set(tensorflow_alone) & set(lines), [line for line in lines if line in tensorflow_alone]


def test_a_level_the_user_set_is_kept(tmp_path, tensorflow_import_lines):
    """At TF_CPP_MIN_LOG_LEVEL=0 the user asked for TensorFlow's log, and sees its start-up lines."""
    tensorflow_alone = tensorflow_import_lines
    lines = _moxlite_run(tmp_path, "0")
    first_own = next(index for index, line in enumerate(lines) if line.startswith("INFO:moxlite:"))
    before = lines[:first_own]
    startup = [line for line in tensorflow_alone if "port.cc" in line or "cpu_feature_guard" in line]
    assert startup, tensorflow_alone
    for line in startup:   # the same source lines (their timestamps and thread ids differ)
        assert any(line.split("] ", 1)[1] in mine for mine in before), (line, before)


def test_the_level_is_set_only_when_unset():
    environment = {}
    assert logs.quiet_tensorflow_startup(environment) == logs.QUIET_TF_CPP_MIN_LOG_LEVEL
    assert environment == {"TF_CPP_MIN_LOG_LEVEL": logs.QUIET_TF_CPP_MIN_LOG_LEVEL}
    for users in ("0", "1", "2"):
        environment = {"TF_CPP_MIN_LOG_LEVEL": users, "TF_ENABLE_ONEDNN_OPTS": "1"}
        assert logs.quiet_tensorflow_startup(environment) == users
        assert environment == {"TF_CPP_MIN_LOG_LEVEL": users, "TF_ENABLE_ONEDNN_OPTS": "1"}


def test_stderr_lines_are_filtered_by_absl_severity_and_other_lines_kept():
    info = "I0000 00:00:1796153726.266367    6621 port.cc:153] oneDNN custom operations are on.\n"
    error = "E0000 00:00:1796153730.048954    6621 cuda_platform.cc:52] failed call to cuInit\n"
    banner = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    python = "UserWarning: something a user module warned about\n"
    assert [logs.keep_stderr_line(line, 1) for line in (info, error, banner, python)] == [False, True, False, True]
    assert [logs.keep_stderr_line(line, 3) for line in (info, error, banner, python)] == [False, False, False, True]
    assert all(logs.keep_stderr_line(line, 0) for line in (info, error, banner, python))


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


def test_an_application_handler_added_before_run_receives_the_info_lines(tmp_path):
    """The logger as an application finds it in a fresh process: no handler, no level set."""
    logger = logging.getLogger(logs.LOGGER_NAME)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    for handler in saved[0]:
        logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)
    mine = _Records()
    logger.addHandler(mine)
    try:
        images, labels = runlib.mnist_rows(64)
        mox.run(input_fn=runlib.input_fn_for(images, labels), model_fn=runlib.softmax_model_fn,
                optimizer_fn=mox.get_optimizer_fn("sgd", 0.1), run_mode=mox.ModeKeys.TRAIN, batch_size=16,
                log_dir=str(tmp_path / "run"), max_number_of_steps=4, log_every_n_steps=2)
    finally:
        logger.removeHandler(mine)
        for handler in saved[0]:
            logger.addHandler(handler)
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    info = [record.getMessage() for record in mine.records if record.levelno == logging.INFO]
    assert any(line.startswith("step: 2(global step: 2)") for line in info), info
    assert any(line.startswith("step: 4(global step: 4)") for line in info), info


def test_a_level_the_application_set_on_the_logger_is_respected():
    logger = logging.getLogger(logs.LOGGER_NAME)
    saved = logger.level
    logger.setLevel(logging.WARNING)
    try:
        assert logs.get_logger().level == logging.WARNING
    finally:
        logger.setLevel(saved)
