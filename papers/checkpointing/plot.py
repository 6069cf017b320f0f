"""scan_checkpointing.svg: the memory reverse mode adds, against the number of steps,
log-log, one line per checkpoint policy, with a sqrt(n) guide."""
import math

COLOURS = ["#c0392b", "#2471a3", "#7d3c98", "#1e8449", "#7f8c8d"]
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 420, 80, 600, 40, 360


def write_svg(rows, path):
    points = [(r["n"], r["memory"]) for r in rows if r["memory"] > 0]
    if not points:
        return
    x0, x1 = math.log10(min(n for n, _ in points)), math.log10(max(n for n, _ in points))
    y0 = math.floor(math.log10(min(m for _, m in points)))
    y1 = math.ceil(math.log10(max(m for _, m in points)))
    x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)

    def at(n, m):
        x = LEFT + (RIGHT - LEFT) * (math.log10(n) - x0) / (x1 - x0)
        y = BOTTOM - (BOTTOM - TOP) * (math.log10(m) - y0) / (y1 - y0)
        return x, y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="20" text-anchor="middle">Memory added by reverse '
           'mode (bytes) against scan length, log-log</text>']
    for power in range(y0, y1 + 1):
        _, y = at(10 ** x0, 10.0 ** power)
        out.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" font-size="11" '
                   f'text-anchor="end">1e{power}</text>')
    for n in sorted({r["n"] for r in rows}):
        x, _ = at(n, 10.0 ** y0)
        out.append(f'<text x="{x:.1f}" y="{BOTTOM + 18}" font-size="11" '
                   f'text-anchor="middle">{n}</text>')
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    for k, policy in enumerate(policies):
        series = sorted((r["n"], r["memory"]) for r in rows
                        if r["policy"] == policy and r["memory"] > 0)
        colour = COLOURS[k % len(COLOURS)]
        if series:
            xy = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(n, m) for n, m in series))
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                       f'points="{xy}"/>')
        out.append(f'<text x="{LEFT + 10}" y="{TOP + 14 * k}" font-size="12" '
                   f'fill="{colour}">checkpoint={policy}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out))
