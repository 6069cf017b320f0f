"""The graph viewer page (ak.ir.view) in a real headless browser: Debian's chromium,
driven by selenium through chromedriver. Skipped, saying why, where any is missing."""
import shutil

import pytest

import adkit as ak
from adkit.ir import printing

pytest.importorskip("selenium", reason="the browser test drives chromium with selenium "
                    "(pip install selenium; it is in the test extra)")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="no headless browser: install Debian's chromium and chromium-driver "
           "(apt-get install chromium chromium-driver; .ci/run tries to)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,900"]


def model(x, w):
    y = x @ w
    h = ak.tanh(y)  # the line the tooltip names
    return (h * 2 + 1).sum()


TANH_LINE = model.__code__.co_firstlineno + 2


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS + [f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def graphs():
    x, w = ak.randn(3, 4), ak.randn(4, 5)
    forward = ak.trace(model, x, w)
    return forward, ak.ir.passes.fuse(ak.ir.passes.vjp(forward))


def _load(browser, path):
    browser.get(f"file://{path}")
    browser.get_log("browser")  # drop what an earlier page logged
    browser.refresh()
    return browser.find_elements(By.CSS_SELECTOR, ".adkit-panel")


def _errors(browser):
    return [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def _data(browser, index=0):
    """The page's own node data (ids as the picture has them) for panel `index`."""
    return browser.execute_script(
        "return JSON.parse(document.getElementById('adkit-data').textContent)"
        ".panels[arguments[0]]", index)


def _node(browser, panel, op, index=0):
    """The picture's element of the first top-level node whose op is `op`."""
    nodes = _data(browser, index)["nodes"]
    i = next(i for i, r in nodes.items() if r["op"] == op and not r["clusters"])
    return panel.find_element(By.CSS_SELECTOR, f'g.node[data-id="{i}"]')


def _kernel(browser, panel, index=0):
    """(cluster element, [elements of the nodes inside]) of a fused kernel's body."""
    data = _data(browser, index)
    cid = next(c for c, r in data["clusters"].items() if r["record"]["op"] == "fused_kernel"
               and r["size"] > 1)
    inside = [panel.find_element(By.CSS_SELECTOR, f'g.node[data-id="{i}"]')
              for i, r in data["nodes"].items() if cid in r["clusters"]]
    return panel.find_element(By.CSS_SELECTOR, f'g.cluster[data-id="{cid}"]'), inside


def test_viewer_page_loads_with_nodes_and_no_errors(browser, graphs, tmp_path):
    path = ak.ir.view(*graphs, path=tmp_path / "page.html", titles=["forward", "vjp"])
    panels = _load(browser, path)
    assert _errors(browser) == []
    assert [p.find_element(By.TAG_NAME, "h2").text for p in panels] == ["forward", "vjp"]
    forward, _ = graphs
    shown = [g for g in panels[0].find_elements(By.CSS_SELECTOR, "g.node") if g.is_displayed()]
    assert len(shown) == len(forward)  # every node of the forward graph, each once
    assert browser.find_element(By.ID, "adkit-tooltip").is_displayed() is False


def test_viewer_hover_shows_op_type_and_source_line(browser, graphs, tmp_path):
    forward, _ = graphs
    # a copy beside it: nodes of the same source line light up in the other panel
    panels = _load(browser, ak.ir.view(forward, forward.copy(), path=tmp_path / "hover.html"))
    tanh = _node(browser, panels[0], "tanh")
    ActionChains(browser).move_to_element(tanh).perform()
    tip = browser.find_element(By.ID, "adkit-tooltip")
    assert tip.is_displayed()
    for text in ("tanh", "f32[3,5]", "float32", "(3, 5)",
                 f"test_viewer_browser.py:{TANH_LINE}"):
        assert text in tip.text, (text, tip.text)
    assert "adkit-hover" in tanh.get_attribute("class")
    linked = panels[1].find_elements(By.CSS_SELECTOR, "g.node.adkit-linked")
    assert [g.get_attribute("data-id") for g in linked] == [tanh.get_attribute("data-id")]
    ActionChains(browser).move_to_element(panels[0].find_element(By.TAG_NAME, "h2")).perform()
    assert not tip.is_displayed()
    assert _errors(browser) == []


def test_viewer_click_opens_and_closes_a_fused_kernel(browser, graphs, tmp_path):
    _, backward = graphs
    panel, = _load(browser, ak.ir.view(backward, path=tmp_path / "click.html"))
    cluster, inside = _kernel(browser, panel)
    assert inside and not any(g.is_displayed() for g in inside)
    assert "adkit-collapsed" in cluster.get_attribute("class")
    assert "click to open" in cluster.text
    cluster.click()
    assert "adkit-collapsed" not in cluster.get_attribute("class")
    assert all(g.is_displayed() for g in inside)
    cluster.find_element(By.TAG_NAME, "text").click()  # its label closes it again
    assert not any(g.is_displayed() for g in inside)
    panel.find_element(By.CSS_SELECTOR, 'button[data-act="expand"]').click()
    assert all(g.is_displayed() for g in inside)
    assert _errors(browser) == []


def _transform(panel):
    return panel.find_element(By.CSS_SELECTOR, ".adkit-stage").get_attribute("style")


def test_viewer_wheel_zooms_and_drag_pans(browser, graphs, tmp_path):
    forward, _ = graphs
    panel, = _load(browser, ak.ir.view(forward, path=tmp_path / "zoom.html"))
    viewport = panel.find_element(By.CSS_SELECTOR, ".adkit-viewport")
    before = _transform(panel)
    assert "scale(" in before
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(viewport), 0, -300) \
        .perform()
    zoomed = _transform(panel)
    assert zoomed != before
    scale = lambda style: float(style.split("scale(")[1].split(")")[0])  # noqa: E731
    assert scale(zoomed) > scale(before)  # wheel up zooms in
    ActionChains(browser).move_to_element_with_offset(viewport, 5, 5).click_and_hold() \
        .move_by_offset(60, 40).release().perform()
    panned = _transform(panel)
    assert panned != zoomed and scale(panned) == scale(zoomed)
    assert _errors(browser) == []


def test_viewer_own_layout_works_without_a_renderer(browser, graphs, tmp_path, monkeypatch):
    """With no Graphviz renderer the page draws its own layout; hover and clicks work."""
    monkeypatch.setattr(printing, "to_svg", lambda graph: None)
    _, backward = graphs
    panel, = _load(browser, ak.ir.view(backward, path=tmp_path / "own.html"))
    assert panel.get_attribute("data-layout") == "layered"
    assert "own layout" in panel.find_element(By.CSS_SELECTOR, ".adkit-note").text
    node = _node(browser, panel, "fused_kernel")
    ActionChains(browser).move_to_element(node).perform()
    assert "fused_kernel" in browser.find_element(By.ID, "adkit-tooltip").text
    _, inside = _kernel(browser, panel)
    assert inside and not any(g.is_displayed() for g in inside)
    node.click()  # here the kernel has a box of its own, which opens its body
    assert any(g.is_displayed() for g in inside)
    assert _errors(browser) == []


def test_viewer_loop_opens_with_its_bodies(browser, tmp_path):
    """A while_loop's cond and body open together from the loop; hovering a kernel
    or loop drawn as its cluster describes the node."""
    graph = ak.trace(lambda x: ak.while_loop(lambda c: c.sum() < 10, lambda c: c * 2, x),
                     ak.ones(3))
    panel, = _load(browser, ak.ir.view(graph, path=tmp_path / "loop.html"))
    data = _data(browser)
    inside = {c: [panel.find_element(By.CSS_SELECTOR, f'g.node[data-id="{i}"]')
                  for i, r in data["nodes"].items() if c in r["clusters"]]
              for c, r in data["clusters"].items() if "cond" in r["label"]
              or "body" in r["label"]}
    assert len(inside) == 2 and all(inside.values())
    assert not any(g.is_displayed() for gs in inside.values() for g in gs)
    loop = next(i for i, r in data["nodes"].items() if r["op"] == "while_loop")
    node = panel.find_element(By.CSS_SELECTOR, f'g.node[data-id="{loop}"]')
    ActionChains(browser).move_to_element(node).perform()
    assert "click to open its body" in browser.find_element(By.ID, "adkit-tooltip").text
    node.click()
    assert all(g.is_displayed() for gs in inside.values() for g in gs)
    assert _errors(browser) == []


def test_viewer_links_a_forward_node_to_its_derivatives(browser, graphs, tmp_path):
    """Derived nodes keep the source line of the node they were made for: hovering the
    forward tanh lights up its gradient's nodes in the vjp graph beside it."""
    forward, _ = graphs
    backward = ak.ir.passes.vjp(forward)
    panels = _load(browser, ak.ir.view(forward, backward, path=tmp_path / "link.html"))
    source = f"test_viewer_browser.py:{TANH_LINE}"
    want = sorted(i for i, r in _data(browser, 1)["nodes"].items()
                  if r.get("source") == source)
    assert len(want) > 1  # tanh and its derivative's ops
    ActionChains(browser).move_to_element(_node(browser, panels[0], "tanh")).perform()
    linked = panels[1].find_elements(By.CSS_SELECTOR, "g.node.adkit-linked")
    assert sorted(g.get_attribute("data-id") for g in linked) == want
    assert _errors(browser) == []
