import pytest

from tests.harness import Whoami


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
