/* The console's live updates: one server-sent event stream per page. Each "snapshot" event
   (a new poll of the cluster) makes the page's live parts fetch themselves again through htmx
   (hx-trigger="snapshot from:body"). The stream is closed when the page is hidden, so a page
   kept in the back-forward cache never holds one of the browser's few connections to the
   console, and reopened when the page is shown again. */
(function () {
  "use strict";
  var source = null;
  function open() {
    if (source !== null) return;
    source = new EventSource("/events");
    source.addEventListener("snapshot", function () { htmx.trigger(document.body, "snapshot"); });
  }
  function close() {
    if (source !== null) { source.close(); source = null; }
  }
  window.addEventListener("pageshow", open);
  window.addEventListener("pagehide", close);
})();
