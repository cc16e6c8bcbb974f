import compileall

import pytest

from tests.harness import ROOT, Whoami


def pytest_sessionstart(session: pytest.Session) -> None:
    """edge's bytecode on disk before any test starts a process.

    Hundreds of tests start ``python -m edge`` (edge itself, whoami backends); where
    ``PYTHONDONTWRITEBYTECODE`` is set, as on the machines these tests run on, no
    process writes the ``__pycache__`` it compiles, so each start compiled all of
    edge/ again (0.4 s of CPU of its 0.9 s). Compiling once here, only the modules
    whose source changed, lets every start load bytecode.
    """
    compileall.compile_dir(ROOT / "edge", quiet=1)


@pytest.fixture(params=["httptools", "h11"])
def parser(request) -> str:
    """Every integration test that takes this fixture runs under both HTTP codecs."""
    return request.param


@pytest.fixture(scope="session")
def whoami():
    w = Whoami("w1")
    yield w
    w.stop()


@pytest.fixture(scope="session")
def whoami2():
    w = Whoami("w2")
    yield w
    w.stop()
