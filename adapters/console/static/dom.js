// Xpert Gateway console: the two DOM helpers every page script uses (loaded before them).
window.xgwDom = Object.freeze({
  $: (sel) => document.querySelector(sel),
  el: (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  },
});
