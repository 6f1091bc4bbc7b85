// dq dashboard: live numbers and select-all. No framework; nothing loaded from elsewhere.
(function () {
  'use strict';
  // Every element with data-refresh is reloaded from that URL every data-refresh-ms of <body>.
  function refresh() {
    document.querySelectorAll('[data-refresh]').forEach(function (el) {
      fetch(el.dataset.refresh, { credentials: 'same-origin' })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          el.innerHTML = html;
          document.body.dataset.refreshedAt = String(Date.now());
          document.body.classList.remove('stale');
        })
        // Keep the last numbers, marked stale; the next tick tries again.
        .catch(function () { document.body.classList.add('stale'); });
    });
  }
  document.addEventListener('DOMContentLoaded', function () {
    var period = Number(document.body.dataset.refreshMs || 0);
    if (period > 0 && document.querySelector('[data-refresh]')) setInterval(refresh, period);
  });
  // Forms that cannot be undone ask first.
  document.addEventListener('submit', function (ev) {
    var question = ev.target.dataset && ev.target.dataset.confirm;
    if (question && !window.confirm(question)) ev.preventDefault();
  });
  // The topic page's "select all" box.
  document.addEventListener('change', function (ev) {
    if (!ev.target.matches('[data-select-all]')) return;
    document.querySelectorAll('#jobs input[name=id]').forEach(function (box) {
      box.checked = ev.target.checked;
    });
  });
})();
