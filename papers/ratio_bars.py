"""A bar chart of gradient / objective ratios (one group per problem size, one bar per
framework) with the published figure as a dashed line, as SVG text: shared by the
ADBench reproductions (adbench_lstm, adbench_ba)."""
COLOURS = {"adkit": "#2471a3", "jax": "#7d3c98", "torch": "#c0392b", "autograd": "#7f8c8d"}
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 680, 420, 60, 660, 50, 360


def write_svg(rows, path, title, published=None, size_label=None):
    """rows: dicts with "framework", "ratio" and the size keys `size_label(row)` names."""
    size_label = size_label or (lambda r: f"{r['layers']}x{r['chars']}")
    sizes = list(dict.fromkeys(size_label(r) for r in rows))
    frameworks = list(dict.fromkeys(r["framework"] for r in rows))
    top = max([r["ratio"] for r in rows] + [published or 0]) * 1.15 or 1.0

    def y(value):
        return BOTTOM - (BOTTOM - TOP) * value / top
    group = (RIGHT - LEFT) / max(len(sizes), 1)
    bar = group * 0.8 / max(len(frameworks), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle">{title}</text>',
           f'<line x1="{LEFT}" x2="{RIGHT}" y1="{BOTTOM}" y2="{BOTTOM}" stroke="black"/>']
    for r in rows:
        g, f = sizes.index(size_label(r)), frameworks.index(r["framework"])
        x = LEFT + g * group + group * 0.1 + f * bar
        out.append(f'<rect x="{x:.1f}" y="{y(r["ratio"]):.1f}" width="{bar * 0.9:.1f}" '
                   f'height="{BOTTOM - y(r["ratio"]):.1f}" '
                   f'fill="{COLOURS.get(r["framework"], "black")}"/>')
        out.append(f'<text x="{x + bar * 0.45:.1f}" y="{y(r["ratio"]) - 3:.1f}" '
                   f'font-size="9" text-anchor="middle">{r["ratio"]:.1f}</text>')
    for g, label in enumerate(sizes):
        out.append(f'<text x="{LEFT + (g + 0.5) * group:.1f}" y="{BOTTOM + 16}" '
                   f'font-size="11" text-anchor="middle">{label}</text>')
    if published:
        out.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{y(published):.1f}" '
                   f'y2="{y(published):.1f}" stroke="black" stroke-dasharray="6,4"/>')
        out.append(f'<text x="{RIGHT}" y="{y(published) - 4:.1f}" font-size="11" '
                   f'text-anchor="end">published: {published:g}</text>')
    for k, f in enumerate(frameworks):
        out.append(f'<rect x="{LEFT + 8}" y="{TOP + 14 * k - 9}" width="10" height="10" '
                   f'fill="{COLOURS.get(f, "black")}"/>')
        out.append(f'<text x="{LEFT + 22}" y="{TOP + 14 * k}" font-size="11">{f}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out))
