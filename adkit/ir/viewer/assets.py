"""The viewer page's stylesheet and script, inlined into every page (no CDN, no network).

Owns: `CSS`, `SCRIPT`. The script reads the JSON in `#adkit-data` (page.py) and works on
SVG shaped like Graphviz's output: `g.node`, `g.edge`, `g.cluster`, each with a <title>
holding its id (an edge's is `tail->head`). It pans (drag), zooms (wheel, around the
pointer), shows hover data, and opens and closes bodies (clusters start closed).
Does not: lay out anything; positions are the picture's.
"""

CSS = """
body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:0;padding:8px;
  background:#fafafa;color:#222}
.adkit-help{margin:2px 6px 8px;color:#555;font-size:13px}
.adkit-panels{display:flex;gap:8px;align-items:stretch}
.adkit-panel{flex:1 1 0;min-width:0;border:1px solid #ccc;border-radius:6px;
  background:#fff;display:flex;flex-direction:column}
.adkit-panel header{display:flex;justify-content:space-between;align-items:center;
  padding:4px 8px;border-bottom:1px solid #eee}
.adkit-panel h2{font-size:15px;margin:0}
.adkit-tools button{font-size:12px;margin-left:4px}
.adkit-note{margin:4px 8px;font-size:12px;color:#8a5a00}
.adkit-viewport{position:relative;overflow:hidden;height:calc(100vh - 150px);
  min-height:320px;cursor:grab;user-select:none;touch-action:none}
.adkit-viewport.adkit-dragging{cursor:grabbing}
.adkit-stage{position:absolute;left:0;top:0;transform-origin:0 0}
.adkit-stage svg{display:block;overflow:visible}
.adkit-panel details{padding:4px 8px;font-size:12px}
.adkit-panel pre{max-height:30em;overflow:auto;margin:4px 0}
g.node.adkit-has-body,g.cluster{cursor:pointer}
g.node.adkit-hover ellipse,g.node.adkit-hover polygon,g.node.adkit-hover path,
g.node.adkit-hover rect{stroke:#d62728;stroke-width:3px}
g.node.adkit-linked ellipse,g.node.adkit-linked polygon,g.node.adkit-linked path,
g.node.adkit-linked rect{stroke:#ff7f0e;stroke-width:3px}
g.cluster.adkit-collapsed path,g.cluster.adkit-collapsed polygon,
g.cluster.adkit-collapsed rect{fill:#e9eef6;stroke:#555}
#adkit-tooltip{position:fixed;z-index:10;max-width:520px;background:#fffffe;
  border:1px solid #888;border-radius:4px;padding:6px 8px;font-size:12px;
  box-shadow:0 2px 6px rgba(0,0,0,.25);pointer-events:none;line-height:1.45}
#adkit-tooltip[hidden]{display:none}
#adkit-tooltip .adkit-op{font-weight:bold;font-size:13px}
#adkit-tooltip code{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:pre-wrap}
#adkit-tooltip .adkit-hint{color:#666;font-style:italic}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("adkit-data").textContent);
  var tip = document.getElementById("adkit-tooltip");
  var panels = [];

  // The id Graphviz wrote in an element's <title>; the <title> goes (no native tooltip).
  function takeTitle(g) {
    var t = null;
    for (var i = 0; i < g.children.length; i++) {
      if (g.children[i].tagName.toLowerCase() === "title") { t = g.children[i]; break; }
    }
    if (!t) { return null; }
    var id = t.textContent.trim();
    t.remove();
    return id;
  }

  function endpoint(text) { return text.split(":")[0].trim(); }  // drop a port

  function Panel(section, info) {
    var self = this;
    this.info = info;
    this.viewport = section.querySelector(".adkit-viewport");
    this.stage = section.querySelector(".adkit-stage");
    this.svg = this.stage.querySelector("svg");
    this.nodes = {}; this.clusters = {}; this.edges = []; this.open = {};
    this.view = {x: 0, y: 0, s: 1};
    // Graphviz turns `tooltip=` into links with titles: the browser's own tooltip
    // would cover ours
    this.svg.querySelectorAll("a").forEach(function (a) {
      a.removeAttributeNS("http://www.w3.org/1999/xlink", "title");
      a.removeAttribute("title");
    });
    this.svg.querySelectorAll("g.node").forEach(function (g) {
      var id = takeTitle(g);
      if (id === null) { return; }
      g.setAttribute("data-id", id);
      self.nodes[id] = g;
      var rec = info.nodes[id];
      if (rec && rec.bodies.length) { g.classList.add("adkit-has-body"); }
    });
    this.svg.querySelectorAll("g.cluster").forEach(function (g) {
      var id = takeTitle(g);
      if (id === null) { return; }
      g.setAttribute("data-id", id);
      self.clusters[id] = g;
      var label = g.querySelector("text");
      if (label) { g.adkitLabel = label.textContent; }
    });
    this.svg.querySelectorAll("g.edge").forEach(function (g) {
      var id = takeTitle(g);
      if (id === null) { return; }
      var ends = id.split(/->|--/);
      self.edges.push([g, endpoint(ends[0]), endpoint(ends[ends.length - 1])]);
    });
    Object.keys(info.clusters).forEach(function (c) { self.open[c] = false; });
    this.sizeSvg();
    this.bindNodes();
    this.bindPanZoom();
    section.querySelectorAll(".adkit-tools button").forEach(function (b) {
      b.addEventListener("click", function () { self.act(b.getAttribute("data-act")); });
    });
    this.refresh();
    this.fit();
  }

  // Graphviz sizes its SVG in points; the viewer works in the viewBox's units.
  Panel.prototype.sizeSvg = function () {
    var vb = this.svg.viewBox && this.svg.viewBox.baseVal;
    var w = vb && vb.width ? vb.width : this.svg.getBBox().width;
    var h = vb && vb.height ? vb.height : this.svg.getBBox().height;
    this.width = w; this.height = h;
    this.svg.setAttribute("width", w); this.svg.setAttribute("height", h);
  };

  Panel.prototype.apply = function () {
    var v = this.view;
    this.stage.style.transform =
      "translate(" + v.x + "px, " + v.y + "px) scale(" + v.s + ")";
  };

  Panel.prototype.fit = function () {
    var vw = this.viewport.clientWidth, vh = this.viewport.clientHeight;
    var s = Math.min(vw / this.width, vh / this.height, 1);
    this.view = {x: Math.max((vw - this.width * s) / 2, 0), y: 4, s: s};
    this.apply();
  };

  Panel.prototype.act = function (what) {
    var self = this;
    if (what === "fit") { this.fit(); return; }
    Object.keys(this.open).forEach(function (c) { self.open[c] = what === "expand"; });
    this.refresh();
  };

  Panel.prototype.toggle = function (clusterIds) {
    var self = this;
    var openIt = clusterIds.some(function (c) { return !self.open[c]; });
    clusterIds.forEach(function (c) { self.open[c] = openIt; });
    Object.keys(this.info.clusters).forEach(function (c) {  // a loop opens with its bodies
      var g = self.info.clusters[c].group;
      if (g && clusterIds.indexOf(g) >= 0) { self.open[c] = openIt; }
    });
    this.refresh();
  };

  // A node or cluster shows when every body it sits in is open; an edge while one of
  // its ends does (an edge into a closed body ends on its box).
  Panel.prototype.refresh = function () {
    var self = this, info = this.info;
    function shown(chain) { return chain.every(function (c) { return self.open[c]; }); }
    Object.keys(this.clusters).forEach(function (c) {
      var g = self.clusters[c], rec = info.clusters[c];
      g.style.display = !rec || shown(rec.parents) ? "" : "none";
      g.classList.toggle("adkit-collapsed", !!rec && !self.open[c]);
      var label = g.querySelector("text");
      if (label && rec && g.adkitLabel !== undefined) {
        label.textContent = g.adkitLabel + (self.open[c] ? " \u25BE" :
          " \u25B8 " + rec.size + " ops: click to open");
      }
    });
    var hidden = {};
    Object.keys(this.nodes).forEach(function (id) {
      var rec = info.nodes[id];
      hidden[id] = !!rec && !shown(rec.clusters);
      self.nodes[id].style.display = hidden[id] ? "none" : "";
    });
    this.edges.forEach(function (e) {
      e[0].style.display = hidden[e[1]] && hidden[e[2]] ? "none" : "";
    });
  };

  Panel.prototype.bindNodes = function () {
    var self = this;
    Object.keys(this.nodes).forEach(function (id) {
      var g = self.nodes[id];
      g.addEventListener("mouseenter", function (ev) {
        hover(self, self.info.nodes[id], g, ev);
      });
      g.addEventListener("mousemove", place);
      g.addEventListener("mouseleave", unhover);
      g.addEventListener("click", function () {
        var rec = self.info.nodes[id];
        if (!self.dragged && rec && rec.bodies.length) {
          self.toggle(rec.bodies); hover(self, rec, g, null);
        }
      });
    });
    Object.keys(this.clusters).forEach(function (c) {
      var g = self.clusters[c], rec = self.info.clusters[c];
      if (!rec) { return; }  // not a body (a legend): left as drawn
      // a kernel drawn as its cluster (no box of its own) is described by the cluster
      var described = rec.owner === null && rec.record ?
        Object.assign({}, rec.record, {bodies: [c]}) : null;
      if (described) {
        g.addEventListener("mouseenter", function (ev) { hover(self, described, g, ev); });
        g.addEventListener("mousemove", place);
        g.addEventListener("mouseleave", unhover);
      }
      g.addEventListener("click", function (ev) {
        if (self.dragged) { return; }
        ev.stopPropagation();
        self.toggle([c]);
        if (described) { hover(self, described, g, null); }
      });
    });
  };

  Panel.prototype.bindPanZoom = function () {
    var self = this, vp = this.viewport, start = null;
    vp.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = vp.getBoundingClientRect(), v = self.view;
      var px = ev.clientX - r.left, py = ev.clientY - r.top;
      var s = Math.min(Math.max(v.s * Math.exp(-ev.deltaY * 0.0015), 0.02), 40);
      self.view = {x: px - (px - v.x) * s / v.s, y: py - (py - v.y) * s / v.s, s: s};
      self.apply();
    }, {passive: false});
    vp.addEventListener("mousedown", function (ev) {
      if (ev.button !== 0) { return; }
      start = {mx: ev.clientX, my: ev.clientY, x: self.view.x, y: self.view.y};
      self.dragged = false;
    });
    window.addEventListener("mousemove", function (ev) {
      if (!start) { return; }
      var dx = ev.clientX - start.mx, dy = ev.clientY - start.my;
      if (Math.abs(dx) + Math.abs(dy) > 3) {  // a click that wobbles is still a click
        self.dragged = true; vp.classList.add("adkit-dragging"); unhover();
      }
      if (self.dragged) {
        self.view.x = start.x + dx; self.view.y = start.y + dy; self.apply();
      }
    });
    window.addEventListener("mouseup", function () {
      start = null; vp.classList.remove("adkit-dragging");
      setTimeout(function () { self.dragged = false; }, 0);  // after this click event
    });
  };

  function line(parent, cls, text, tag) {
    var el = document.createElement(tag || "div");
    if (cls) { el.className = cls; }
    el.textContent = text;
    parent.appendChild(el);
    return el;
  }

  function hover(panel, rec, g, ev) {
    if (!rec || !rec.op) { return; }
    tip.textContent = "";
    line(tip, "adkit-op", rec.op + (rec.name ? "  \u2192  " + rec.name : ""));
    line(tip, "adkit-type", "type: " + rec.specs.join(", ") + "   shape: " +
      rec.shape.map(function (s) { return "(" + s.join(", ") + ")"; }).join(", ") +
      "   dtype: " + rec.dtype.join(", "));
    if (rec.line) { line(line(tip, "", ""), "", rec.line, "code"); }
    if (rec.source) {
      var src = line(tip, "adkit-source", "source: " + rec.source);
      if (rec.code) { src.appendChild(document.createTextNode("   ")); line(src, "", rec.code, "code"); }
    }
    if (rec.bodies.length) {
      var isOpen = rec.bodies.every(function (c) { return panel.open[c]; });
      line(tip, "adkit-hint", "click to " + (isOpen ? "close" : "open") + " its body");
    }
    tip.hidden = false;
    if (ev) { place(ev); }
    document.querySelectorAll(".adkit-hover,.adkit-linked").forEach(function (g) {
      g.classList.remove("adkit-hover", "adkit-linked");
    });
    g.classList.add("adkit-hover");
    if (rec.source) { link(panel, rec.source); }
  }

  // The same source line in the other graphs (a forward op and its derivative's ops).
  function link(from, source) {
    panels.forEach(function (p) {
      if (p === from) { return; }
      Object.keys(p.nodes).forEach(function (id) {
        var r = p.info.nodes[id];
        if (r && r.source === source) { p.nodes[id].classList.add("adkit-linked"); }
      });
    });
  }

  function place(ev) {
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth) { x = Math.max(ev.clientX - w - 14, 0); }
    if (y + h > window.innerHeight) { y = Math.max(ev.clientY - h - 14, 0); }
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }

  function unhover() {
    tip.hidden = true;
    document.querySelectorAll(".adkit-hover,.adkit-linked").forEach(function (g) {
      g.classList.remove("adkit-hover", "adkit-linked");
    });
  }

  document.querySelectorAll(".adkit-panel").forEach(function (section, i) {
    panels.push(new Panel(section, data.panels[i]));
  });
})();
"""
