"""Run an Altair chart's Vega dataflow under Node.js with the site's own Vega packages.

The website's interactive charts compute in the browser; this evaluates the same expressions
outside the browser, so tests can compare them with the package's formulas. It needs Node.js and
``node_modules`` (``npm ci``, which ``make test`` runs first); without them it fails, it does not skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Compile a Vega-Lite spec, set signals, run the dataflow and print every dataset as JSON.
VEGA_DATA_JS = """
import fs from 'fs';
const root = process.argv[1];
const vega = await import(root + '/node_modules/vega/index.js');
const vl = await import(root + '/node_modules/vega-lite/build/index.js');
const {spec, signals} = JSON.parse(fs.readFileSync(0, 'utf8'));
const compiled = vl.compile(spec).spec;
const view = new vega.View(vega.parse(compiled), {renderer: 'none'});
for (const [name, value] of Object.entries(signals)) view.signal(name, value);
await view.runAsync();
const out = {};
for (const d of compiled.data || []) {
  out[d.name] = view.data(d.name).map(
    row => Object.fromEntries(Object.entries(row).filter(([, v]) => typeof v !== 'object')));
}
console.log(JSON.stringify(out));
"""


def vega_data(chart, **signals) -> dict[str, list[dict]]:
    """Every dataset of ``chart`` after the browser's dataflow has run with ``signals`` set."""
    if shutil.which("node") is None:
        raise RuntimeError("Node.js is needed to evaluate the charts' Vega expressions")
    if not (ROOT / "node_modules" / "vega-lite" / "package.json").exists():
        raise RuntimeError("the site's Vega packages are missing: run `npm ci` (make test does)")
    payload = json.dumps({"spec": chart.to_dict(), "signals": signals})
    result = subprocess.run(
        ["node", "--input-type=module", "-e", VEGA_DATA_JS, str(ROOT)],
        input=payload,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


def vega_rows(chart, **signals) -> list[dict]:
    """All rows of all datasets of ``chart``, in one list."""
    return [row for rows in vega_data(chart, **signals).values() for row in rows]
