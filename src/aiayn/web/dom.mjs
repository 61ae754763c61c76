// One helper of the page's modules (page.mjs, heads.mjs): an element with its attributes and children.
// A boolean attribute is set as a property (`disabled: true`), every other one as an attribute.

export function element(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === 'boolean') el[k] = v;
    else el.setAttribute(k, v);
  }
  el.append(...children);
  return el;
}
