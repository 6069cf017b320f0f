"""dpsgd.svg: the cost of a DP-SGD step relative to a plain SGD step (dp / sgd, log
scale) against batch size, one colour per framework, one dash pattern per model."""
import math

COLOURS = {"adkit": "#2471a3", "jax": "#7d3c98", "torch": "#c0392b", "autograd": "#7f8c8d"}
DASHES = {"logreg": "", "ffnn": "6,3", "mnist_mlp": "2,3"}
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 420, 70, 600, 40, 360


def _ratios(rows):
    """{(framework, model): [(batch, dp / sgd)]}, by batch."""
    series = {}
    for r in rows:
        if r.get("dp") and r.get("sgd"):
            series.setdefault((r["framework"], r["model"]), []).append(
                (r["batch"], r["dp"] / r["sgd"]))
    return {key: sorted(points) for key, points in series.items()}


def write_svg(rows, frameworks, path):
    series = _ratios(rows)
    if not series:
        return
    batches = sorted({b for points in series.values() for b, _ in points})
    values = [v for points in series.values() for _, v in points]
    y0 = math.floor(math.log10(min(values + [1.0])))
    y1 = math.ceil(math.log10(max(values)) + 1e-9)
    y1 = max(y1, y0 + 1)

    def at(batch, value):
        k = batches.index(batch)
        x = LEFT + (RIGHT - LEFT) * (k / max(len(batches) - 1, 1))
        y = BOTTOM - (BOTTOM - TOP) * (math.log10(value) - y0) / (y1 - y0)
        return x, y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="20" text-anchor="middle">DP-SGD step / SGD step '
           '(log scale) against batch size</text>']
    for power in range(y0, y1 + 1):
        _, y = at(batches[0], 10.0 ** power)
        out.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{10.0 ** power:g}x</text>')
    for b in batches:
        x, _ = at(b, 10.0 ** y0)
        out.append(f'<text x="{x:.1f}" y="{BOTTOM + 18}" font-size="11" '
                   f'text-anchor="middle">{b}</text>')
    for (framework, model), points in sorted(series.items()):
        xy = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(b, v) for b, v in points))
        dash = DASHES.get(model, "")
        out.append(f'<polyline fill="none" stroke="{COLOURS.get(framework, "black")}" '
                   f'stroke-width="2" stroke-dasharray="{dash}" points="{xy}"/>')
    legend = [(f, "") for f in frameworks] + [(m, DASHES[m]) for m in DASHES]
    for k, (name, dash) in enumerate(legend):
        y = TOP + 14 * k
        colour = COLOURS.get(name, "black")
        out.append(f'<line x1="{RIGHT - 120}" x2="{RIGHT - 95}" y1="{y}" y2="{y}" '
                   f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{RIGHT - 90}" y="{y + 4}" font-size="11">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out))
