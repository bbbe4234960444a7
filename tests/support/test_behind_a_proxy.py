"""The engine behind a real pooling proxy, as Chariot runs it: Debian's nginx on loopback, reusing a keep-alive pool
of connections to the engine. A request nginx sends on a connection the engine is closing is lost (502,
"upstream prematurely closed connection"), so the engine keeps idle connections longer than proxies keep them
pooled (CHARIOT_KEEP_ALIVE, 75 s): requests after idle gaps on both sides of nginx's pool timeout and of the
engine's old 5 s keep-alive are all answered."""

import threading
import time

import pytest
import requests
from proxy import POOL_TIMEOUT, nginx_in_front

from chariot_support.dev.testing import chariot_request, image_input
from chariot_support.model.tasks import TaskType

OLD_KEEP_ALIVE = 5.0  # the engine's keep-alive before it outlived the proxies' pools
# Each client's idle gap, one millisecond apart across the moment the old keep-alive closed a connection: a request
# that reached the engine in that moment was lost.
CLIENTS = 24
GAPS = [OLD_KEEP_ALIVE - 0.012 + 0.001 * i for i in range(CLIENTS)]


@pytest.fixture
def nginx(tmp_path, demo_engine):
    """nginx on a free loopback port in front of the shared demo engine, with the engine's default keep-alive."""
    with nginx_in_front(demo_engine(TaskType.OBJECT_DETECTION), tmp_path) as url:
        yield url, tmp_path


@pytest.mark.slow
def test_requests_after_idle_gaps_through_a_pooling_proxy_are_all_answered(nginx, scene):
    url, logs = nginx
    body = chariot_request(image_input("image-0", scene.pixels))
    statuses: list[tuple[float, int]] = []

    def client(gap: float) -> None:
        with requests.Session() as session:  # one connection to nginx; nginx keeps one to the engine for it
            statuses.append((0.0, session.post(f"{url}/v2/models/m-demo/infer", json=body, timeout=30).status_code))
            time.sleep(gap)
            statuses.append((gap, session.post(f"{url}/v2/models/m-demo/infer", json=body, timeout=30).status_code))

    threads = [threading.Thread(target=client, args=(gap,)) for gap in GAPS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(statuses) == 2 * CLIENTS
    lost = [(gap, status) for gap, status in statuses if status != 200]
    errors = (logs / "error.log").read_text()
    assert not lost, f"requests lost behind the proxy (idle gap, status): {lost}\n{errors[-2000:]}"
    assert "prematurely closed" not in errors, errors[-2000:]


def test_by_default_the_engine_keeps_idle_connections_longer_than_nginxs_pool():
    """The proxy, not the engine, must close an idle pooled connection: the engine's default outlasts nginx's."""
    from chariot_support.settings import EngineSettings

    assert EngineSettings().keep_alive > POOL_TIMEOUT
    assert EngineSettings.from_env({"CHARIOT_KEEP_ALIVE": "90"}).keep_alive == 90
