"use strict";
// Expand or collapse every node of the call tree.
function setTree(open) {
  for (const d of document.querySelectorAll("#tree details")) {
    d.open = open;
  }
}
document.getElementById("expand").addEventListener("click", () => setTree(true));
document.getElementById("collapse").addEventListener("click", () => setTree(false));
// A class's swatch picks it: its entry and its ranks' rows stay, the others are dimmed;
// the same swatch again shows every class.
let picked = null;
function pick(k) {
  picked = picked === k ? null : k;
  for (const e of document.querySelectorAll(".class, #ranks tbody tr")) {
    e.classList.toggle("dim", picked !== null && e.dataset.class !== picked);
  }
}
for (const s of document.querySelectorAll(".sw")) {
  s.addEventListener("click", () => pick(s.dataset.class));
}
