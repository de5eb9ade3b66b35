"""Draw docs/img/last-use.png: one chain's blocks over time, renewed on use, expired by age.

    .venv/bin/python scripts/draw_last_use.py

A picture of the policy (not a measurement): a lifecycle rule that expires blocks 7 days
after their last use, and s3kv's tier renewing a used block once its Last-Modified is
older than ``renew_after`` (1 day). The story is made up to show each rule once.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "last-use.png"

EXPIRY_DAYS = 7
BLOCKS = ["b0 (head)", "b1", "b2", "b3 (tail)"]
WRITTEN = 0.0
USES = [(0.5, 4), (3.0, 2), (5.0, 2)]  # (day, how many leading blocks a request used)
RENEW_AFTER = 1.0


def story() -> dict[str, dict[str, list[float]]]:
    """Per block: when it was written, used without a request, renewed, and expired."""
    out = {b: {"written": [WRITTEN], "used": [], "renewed": [], "expired": []} for b in BLOCKS}
    modified = dict.fromkeys(BLOCKS, WRITTEN)
    for day, n in USES:
        for block in BLOCKS[:n]:
            if day - modified[block] >= RENEW_AFTER:
                out[block]["renewed"].append(day)
                modified[block] = day
            else:
                out[block]["used"].append(day)
    for block in BLOCKS:
        out[block]["expired"].append(modified[block] + EXPIRY_DAYS)
    return out


def draw(path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = story()
    fig, ax = plt.subplots(figsize=(9.5, 3.9), dpi=110)
    for row, block in enumerate(BLOCKS):
        y = len(BLOCKS) - row
        e = events[block]
        end = e["expired"][0]
        ax.barh(y, end, left=0, height=0.45, color="#cfe3f7", edgecolor="#5b8fc7")
        ax.scatter(e["written"], [y] * len(e["written"]), marker="s", s=60, color="#1f4e79",
                   zorder=3, label="written" if row == 0 else None)
        ax.scatter(e["used"], [y] * len(e["used"]), marker="o", s=55, facecolor="white",
                   edgecolor="#1f4e79", linewidth=2, zorder=3,
                   label="used, Last-Modified under 1 day old: no request" if row == 0 else None)
        ax.scatter(e["renewed"], [y] * len(e["renewed"]), marker="^", s=90, color="#2e7d32",
                   zorder=3,
                   label="used, older: renewed (a copy onto itself)" if row == 0 else None)
        ax.scatter(e["expired"], [y], marker="X", s=110, color="#c62828", zorder=3,
                   label="expired: 7 days after Last-Modified, which is never more than "
                   "renew_after before the last use" if row == 0 else None)
    ax.annotate("the tail goes first: b2-b3 were last used on day 0.5\n(under a day old then, "
                "so not renewed): gone on day 7", xy=(7.5, 1.5), xytext=(7.6, 1.3), fontsize=9,
                color="#333")
    ax.annotate("the head goes last: renewed on day 5, its last use: gone on day 12",
                xy=(12.5, 3.5), xytext=(6.3, 4.35), fontsize=9, color="#333")
    ax.set_yticks(range(1, len(BLOCKS) + 1), list(reversed(BLOCKS)))
    ax.set_xticks(range(0, 15))
    ax.set_xlim(-0.5, 14.5)
    ax.set_ylim(0.4, len(BLOCKS) + 0.8)
    ax.set_xlabel("day")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("One chain's blocks over time: a lifecycle rule expiring blocks 7 days after "
                 "their last use,\ns3kv's tier renewing a used block older than renew_after "
                 "(1 day); a drawing, not a measurement", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8,
              frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT))
