"""/metrics of a live broker passes `promtool check metrics` (Prometheus's own linter)
and counts what a STOMP client did."""

import shutil
import subprocess
import base64
import urllib.request

import pytest

from clients import PASSWORD, USER


def scrape(broker) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}/metrics")
    login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request.add_header("Authorization", f"Basic {login}")
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def test_metrics_pass_promtool_and_count_stomp_traffic(broker, client_factory, queue_name):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: scripts/install-deps installs the prometheus package")
    producer, consumer = client_factory(), client_factory()
    for i in range(3):
        producer.send(queue_name, f"m{i}")
    # Two delayed ones, so the lateness histogram has samples.
    for i in range(2):
        producer.send(queue_name, f"d{i}", headers={"AMQ_SCHEDULED_DELAY": "200"})
    consumer.subscribe(queue_name)
    consumer.get_n(5)
    text = scrape(broker)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert checked.returncode == 0, f"promtool: {checked.stdout}{checked.stderr}\n{text}"
    # promtool prints lint problems even when it exits 0 for some of them.
    assert checked.stdout.strip() == "" and checked.stderr.strip() == "", checked
    queue = queue_name.removeprefix("/queue/")
    # Three sent and two delayed ones, counted as they fell due.
    assert f'weir_queue_enqueued_messages_total{{queue="{queue}"}} 5' in text
    assert "weir_process_resident_memory_bytes" in text
    assert 'weir_delayed_delivery_lateness_seconds_bucket{le="+Inf"} 2' in text
    assert "weir_delayed_delivery_lateness_seconds_count 2" in text
    # The durable sends went through group commits, each one timed and counted.
    assert "# TYPE weir_store_sync_seconds histogram" in text
    assert "# TYPE weir_store_commit_batch_size histogram" in text
    assert "weir_store_pending_compaction_bytes " in text
    assert "weir_store_running_compactions " in text
    # This client is one producer of the queue while it stays connected.
    assert f'weir_queue_producers{{queue="{queue}"}} 1' in text
    assert 'weir_connections{protocol="stomp",transport="tcp",tls="false"}' in text
