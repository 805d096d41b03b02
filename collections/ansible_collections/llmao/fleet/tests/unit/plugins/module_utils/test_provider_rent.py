"""Renting and returning boxes at Vast and RunPod, against the rig's fake of their documented
rent APIs: offers that fit, cheapest first; creates carrying llmao's label; destroys only of
labelled instances; every failure a typed error that names no secret."""

from __future__ import annotations

import pytest

from ansible_collections.llmao.fleet.plugins.module_utils.config_file import Provider
from ansible_collections.llmao.fleet.plugins.module_utils.listings import read_listings
from ansible_collections.llmao.fleet.plugins.module_utils.pool_config import instance_label
from ansible_collections.llmao.fleet.plugins.module_utils.provider_rent import (
    Need,
    RentError,
    RentRequest,
    rent_client,
)
from rig.rent_api import runpod_gpu, serve_rent_api, vast_offer

KEY = "provider-key-" + "k" * 30
TOKEN = "bootstrap-" + "t" * 30
NEED = Need(("RTX 4090", "RTX A6000"), 1, 24, 80, 0.6)
BOX = "chat-a1b2c3d4"
REQUEST = RentRequest("chat", BOX, "vllm/vllm-openai:latest", 80.0,
                      {"FLEET_KEY": "fleet-" + "f" * 30, "LLMAO_BOOTSTRAP_TOKEN": TOKEN,
                       "LLMAO_HOST": BOX}, "bash /provision.sh")


@pytest.fixture
def api():
    with serve_rent_api() as served:
        served.vast_offers = [
            vast_offer(11, "RTX 4090", 0.55),
            vast_offer(12, "RTX A6000", 0.40),
            vast_offer(13, "RTX 4090", 0.35, gpu_ram_gb=16),     # too little memory
            vast_offer(14, "H100", 0.20),                        # not a GPU the pool takes
            vast_offer(15, "RTX 4090", 0.90),                    # too dear
            vast_offer(16, "RTX 4090", 0.30, disk_gb=40),        # too little disk
            {"id": "x", "gpu_name": "RTX 4090"},                 # unreadable: costs itself
            "nonsense",
        ]
        served.runpod_gpus = [
            runpod_gpu("NVIDIA GeForce RTX 4090", "RTX 4090", 24, secure=0.44, community=0.31),
            runpod_gpu("NVIDIA RTX A6000", "RTX A6000", 48, secure=0.49, community=0.33),
            runpod_gpu("NVIDIA RTX A4000", "RTX A4000", 16, secure=0.2, community=0.1),
            {**runpod_gpu("RTX 4090\x1b[2J" + "x" * 200, "RTX 4090", 24, 0.01, 0.01)},  # hostile
            {"id": "NVIDIA GeForce RTX 4090", "name": "RTX 4090", "memory": "24"},  # no prices
        ]
        yield served


def vast(api, timeout=5.0):
    return rent_client(Provider("vast", api_key=KEY, url=api.vast_url), timeout)


def runpod(api, timeout=5.0):
    return rent_client(Provider("runpod", api_key=KEY, url=api.runpod_url), timeout)


def test_vast_offers_that_fit_come_cheapest_first(api):
    offers = vast(api).offers(NEED)
    assert [(o.offer_id, o.usd_per_hour) for o in offers] == [("12", 0.40), ("11", 0.55)]


def test_vast_interruptible_offers_are_priced_at_their_bid(api):
    offers = vast(api).offers(Need(("RTX 4090",), 1, 24, 80, 0.6, interruptible=True))
    assert [(o.offer_id, o.usd_per_hour, o.bid) for o in offers][:2] == [
        ("11", 0.275, True), ("15", 0.45, True)]


def test_a_vast_create_carries_the_label_env_and_onstart_and_is_listed_by_box_name(api):
    client = vast(api)
    rented = client.create(client.offers(NEED)[0], REQUEST)
    instance = api.instances[rented.instance_id]
    assert instance.label == instance_label("chat", BOX)
    assert instance.env == dict(REQUEST.env) and instance.onstart == "bash /provision.sh"
    assert instance.price == 0.40 and not instance.interruptible
    listed = read_listings({"vast": Provider("vast", api_key=KEY, url=api.vast_url)}, 5.0)
    assert listed.box(BOX).names[0] == rented.instance_id
    assert listed.box(BOX).tag == instance_label("chat", BOX)


def test_a_vast_bid_names_its_price(api):
    client = vast(api)
    offer = client.offers(Need(("RTX 4090",), 1, 24, 80, 0.6, interruptible=True))[0]
    rented = client.create(offer, REQUEST)
    assert api.instances[rented.instance_id].price == 0.275
    assert api.instances[rented.instance_id].interruptible


def test_runpod_offers_per_cloud_cheapest_first_priced_per_card_count(api):
    offers = runpod(api).offers(NEED)
    assert [(o.offer_id, o.cloud, o.usd_per_hour) for o in offers] == [
        ("NVIDIA GeForce RTX 4090", "COMMUNITY", 0.31), ("NVIDIA RTX A6000", "COMMUNITY", 0.33),
        ("NVIDIA GeForce RTX 4090", "SECURE", 0.44), ("NVIDIA RTX A6000", "SECURE", 0.49)]
    two = runpod(api).offers(Need(("RTX 4090",), 2, 24, 80, 0.7))
    assert [(o.cloud, o.usd_per_hour) for o in two] == [("COMMUNITY", 0.62)]


def test_a_runpod_create_names_the_pod_by_the_label_and_destroy_terminates_it(api):
    client = runpod(api)
    rented = client.create(client.offers(NEED)[0], REQUEST)
    assert api.instances[rented.instance_id].label == instance_label("chat", BOX)
    listed = read_listings({"runpod": Provider("runpod", api_key=KEY, url=api.runpod_url)},
                           5.0).box(BOX)
    client.destroy(listed, "chat")
    assert rented.instance_id not in api.instances


@pytest.mark.parametrize("provider", ["vast", "runpod"])
def test_a_destroy_refuses_an_instance_without_the_pools_label(api, provider):
    mine = {"vast": vast, "runpod": runpod}[provider](api)
    other = api.add_unlabelled(provider)
    url = api.vast_url if provider == "vast" else api.runpod_url
    listings = read_listings({provider: Provider(provider, api_key=KEY, url=url)}, 5.0)
    listed = listings.box(other.instance_id)
    with pytest.raises(RentError) as caught:
        mine.destroy(listed, "chat")
    assert caught.value.kind == "unlabelled" and other.instance_id in api.instances
    request = RentRequest("other", "other-a1b2c3d4", "img", 80, {})
    theirs = mine.create(mine.offers(NEED)[0], request)
    listed = read_listings({provider: Provider(provider, api_key=KEY, url=url)},
                           5.0).box(theirs.instance_id)
    with pytest.raises(RentError):
        mine.destroy(listed, "chat")  # another pool's box is not this pool's to return
    assert theirs.instance_id in api.instances
    assert not any(method == "DELETE" for method, _path in api.calls)


def test_a_429_is_a_throttled_error_with_the_wait_asked(api):
    api.throttled_creates = [7]
    client = vast(api)
    with pytest.raises(RentError) as caught:
        client.create(client.offers(NEED)[0], REQUEST)
    assert (caught.value.kind, caught.value.retry_after) == ("throttled", 7.0)
    assert not api.instances


def test_a_create_that_times_out_may_have_created_and_its_instance_is_labelled(api):
    api.hanging_creates = [2.0]
    client = vast(api, timeout=0.5)
    offer = client.offers(NEED)[0]
    with pytest.raises(RentError) as caught:
        client.create(offer, REQUEST)
    assert caught.value.kind == "unreachable" and caught.value.maybe_created
    (instance,) = api.instances.values()
    assert instance.label == instance_label("chat", BOX)


@pytest.mark.parametrize(("status", "kind"), [(400, "refused"), (403, "refused"),
                                              (500, "provider"), (503, "provider")])
def test_provider_errors_are_typed_and_name_no_secret_even_when_echoed(
        api, monkeypatch, status, kind):
    def echo(method, path, body):
        return status, {"error": f"bad env {body}" if body else "no"}, {}

    client = vast(api)
    offer = client.offers(NEED)[0]
    monkeypatch.setattr(api, "answer", echo)
    with pytest.raises(RentError) as caught:
        client.create(offer, REQUEST)
    assert caught.value.kind == kind
    message = str(caught.value)
    assert f"HTTP {status}" in message
    for secret in (KEY, TOKEN, REQUEST.env["FLEET_KEY"]):
        assert secret not in message


def test_an_answer_without_the_documented_shape_is_an_error_not_an_empty_search(api,
                                                                                monkeypatch):
    monkeypatch.setattr(api, "answer", lambda method, path, body: (200, {"offers": "x"}, {}))
    with pytest.raises(RentError) as caught:
        vast(api).offers(NEED)
    assert caught.value.kind == "answer"
