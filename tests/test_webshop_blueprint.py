"""The WebShop views as a Flask blueprint mounted in someone else's app under /shop: the JSON
API and the HTML pages play the same episode as the embedded engine, every URL they build
stays under the prefix, and the host app's own routes keep their behaviour."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from agent_envs.webshop.catalogue import CatalogueSpec, get_catalogue
from agent_envs.webshop.scorer import get_tagger
from agent_envs.webshop.server import ShopServer, create_app, webshop_blueprint
from agent_envs.webshop.session import ShopSession

# The hand-checked mini episode of tests/test_webshop_server.py (ends with the right purchase).
SCRIPT = ["search[running shoes]", "click[b000000001]", "click[navy blue]", "click[10]", "click[buy now]"]


@pytest.fixture()
def host(mini_dir):
    """A host app with its own page and the shop mounted at /shop."""
    catalogue = get_catalogue(CatalogueSpec(source=mini_dir, verify=False))
    shop = ShopServer(catalogue, get_tagger("lexicon"))
    app = Flask("host_app")

    @app.get("/")
    def hello():
        return "hello from the host"

    app.register_blueprint(webshop_blueprint(shop), url_prefix="/shop")
    return app, shop


def test_api_reset_and_step_under_a_prefix(host, mini_dir):
    app, shop = host
    client = app.test_client()
    assert client.get("/shop/healthz").json["status"] == "ok"
    r = client.post("/shop/api/me/reset", json={"task": 0})
    assert r.status_code == 200 and r.json["snapshot"]["page"] == "start"
    # the same episode in the embedded engine, step by step
    ref = ShopSession(shop.catalogue, shop.catalogue.goals[0], shop.tagger, session_id="me")
    for action in SCRIPT:
        r = client.post("/shop/api/me/step", json={"action": action})
        want = ref.act(action)
        assert r.status_code == 200, r.json
        assert r.json["outcome"]["valid"] == want.valid and r.json["outcome"]["score"] == want.score
        assert r.json["snapshot"] == ref.snapshot().to_dict()
    assert r.json["outcome"]["done"] and r.json["outcome"]["score"] == 1.0
    assert client.get("/shop/api/me/snapshot").json["snapshot"]["done"] is True
    assert client.delete("/shop/api/me").json == {"closed": True}
    # errors under the prefix are the shop's JSON answers, with the mounted paths in the hints
    r = client.post("/shop/api/me/step", json={"action": "click[x]"})
    assert r.status_code == 404 and r.json["status"] == 404 and "POST /shop/api/me/reset" in r.json["message"]
    r = client.post("/shop/api/me/reset", data=b"{not json", content_type="application/json")
    assert r.status_code == 400 and r.json["error"] == "Bad Request"


def test_pages_links_and_assets_stay_under_the_prefix(host):
    app, _shop = host
    client = app.test_client()
    assert client.get("/shop/").status_code == 302
    assert re.fullmatch(r"/shop/[0-9a-f]{16}", client.get("/shop/").headers["Location"])
    page = client.get("/shop/fixed_0")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and page.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert 'action="/shop/fixed_0"' in html and 'href="/shop/static/webshop.css"' in html
    r = client.post("/shop/fixed_0", data={"search_query": "running shoes"})
    assert r.status_code == 303 and r.headers["Location"] == "/shop/search_results/fixed_0/running%20shoes/1"
    results = client.get(r.headers["Location"]).get_data(as_text=True)
    hrefs = re.findall(r'href="([^"]+)"', results)
    assert hrefs and all(h.startswith("/shop/") for h in hrefs), hrefs
    css = client.get("/shop/static/webshop.css")
    assert css.status_code == 200 and css.mimetype == "text/css" and "no-store" not in css.headers.get("Cache-Control", "")
    missing = client.get("/shop/search_results/nosuch/shoes/1")
    assert missing.status_code == 404 and missing.mimetype == "text/html"
    assert 'href="/shop/"' in missing.get_data(as_text=True)  # the error page's "New session" link


def test_host_routes_are_untouched(host):
    app, _shop = host
    client = app.test_client()
    r = client.get("/")
    assert r.get_data(as_text=True) == "hello from the host"
    assert "Content-Security-Policy" not in r.headers and "Cache-Control" not in r.headers
    assert "Content-Security-Policy" not in client.get("/nowhere").headers  # the host's own 404


def test_create_app_mounts_the_blueprint_at_the_root(mini_dir):
    app = create_app(CatalogueSpec(source=mini_dir, verify=False), tagger="lexicon")
    assert "webshop" in app.blueprints and isinstance(app.extensions["webshop"], ShopServer)
    client = app.test_client()
    assert client.post("/api/me/reset", json={"task": 0}).json["snapshot"]["page"] == "start"
    assert 'href="/static/webshop.css"' in client.get("/fixed_0").get_data(as_text=True)
    # app-wide: a path no view matches still gets the shop's error page and headers
    r = client.get("/too/many/segments/here")
    assert r.status_code == 404 and "no-store" in r.headers["Cache-Control"] and 'href="/"' in r.get_data(as_text=True)
