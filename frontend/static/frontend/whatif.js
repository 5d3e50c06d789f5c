// The what-if run page: poll the replay's progress and reload once it has finished.
(function () {
  function poll() {
    var box = document.getElementById("whatif-progress");
    if (!box) { return; }
    var bar = document.getElementById("whatif-bar");
    var state = document.getElementById("whatif-state");
    function ask() {
      fetch(box.dataset.status, {credentials: "same-origin"})
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (s) {
          if (!s) { setTimeout(ask, 3000); return; }
          bar.value = s.progress;
          state.textContent = s.state + ", " + Math.round(s.progress * 100) + "%";
          if (s.state === "done" || s.state === "failed") { window.location.reload(); }
          else { setTimeout(ask, 1000); }
        })
        .catch(function () { setTimeout(ask, 3000); });
    }
    ask();
  }
  document.addEventListener("DOMContentLoaded", poll);
})();
