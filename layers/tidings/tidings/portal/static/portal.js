/*
 * Tidings consumer portal.
 *
 * Plain JavaScript, no framework, no build step. It talks only to the public JSON API, with a
 * short-lived session token kept in sessionStorage. The page runs under a strict Content
 * Security Policy: no inline script or style, no eval, and every value from the API is rendered
 * as text (textContent, createElement, createElementNS), never as markup.
 *
 * URLs are relative ("v1/..."), so that the page works wherever the deployment serves it:
 * https://host/prod/portal talks to https://host/prod/v1/..., http://127.0.0.1:8080/portal to
 * http://127.0.0.1:8080/v1/...
 */
(function () {
  "use strict";

  var STORAGE_KEY = "tidings.portal.session";
  var ENDED_MESSAGE = "This portal link has expired or was already used. Ask for a new link.";
  var ENDPOINT_PAGE = 100;
  var CATALOG_PAGE = 100;
  // How deep the catalog's schema view follows nested objects and arrays.
  var SCHEMA_DEPTH = 4;
  var MESSAGE_PAGE = 50;
  var LINE_PAGE = 50;
  var MAX_BATCH_SIZE = 100;
  // A line's waiting messages are counted up to this many (the API's limit).
  var WAITING_COUNT_LIMIT = 10000;
  var MAX_TIMER_MS = 2147483000;
  var SVG_NS = "http://www.w3.org/2000/svg";
  var STATUS_LABELS = {
    pending: "Pending",
    waiting: "Waiting",
    in_flight: "In flight",
    delivered: "Delivered",
    failed: "Failed",
    dead_letter: "Dead letter",
  };
  var STATUS_BADGES = {
    pending: "badge-neutral",
    waiting: "badge-queue",
    in_flight: "badge-info",
    delivered: "badge-ok",
    failed: "badge-warn",
    dead_letter: "badge-bad",
  };
  var CIRCUIT = {
    closed: ["Circuit closed", "badge-ok"],
    open: ["Circuit open", "badge-bad"],
    half_open: ["Circuit half-open", "badge-warn"],
  };

  var state = {
    session: null,
    readOnly: false,
    appPath: "",
    expiryTimer: null,
    tab: "endpoints",
    endpoints: [],
    endpointsCursor: null,
    endpointsLoaded: false,
    endpointById: new Map(),
    endpoint: null,
    deliveries: { filter: {}, cursor: null, loaded: false },
    message: null,
    // The open endpoint's FIFO lines: the page loaded so far, paused ones first.
    lines: { items: [], cursor: null, pausedOnly: false },
    dead: { endpointId: "", cursor: null, items: [], selected: new Set() },
    // The deployment's event types (archived ones are never shown).
    catalog: { items: [], loaded: false, loading: null },
  };

  // -- small helpers ------------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  /** An element with attributes and children; strings become text nodes, never markup. */
  function h(tag, props, children) {
    var node = document.createElement(tag);
    setProps(node, props);
    appendAll(node, children);
    return node;
  }

  function svg(tag, props, children) {
    var node = document.createElementNS(SVG_NS, tag);
    setProps(node, props);
    appendAll(node, children);
    return node;
  }

  function setProps(node, props) {
    if (!props) return;
    Object.keys(props).forEach(function (key) {
      var value = props[key];
      if (value === null || value === undefined || value === false) return;
      if (key === "text") {
        node.textContent = String(value);
      } else if (key === "testid") {
        node.setAttribute("data-testid", String(value));
      } else if (key.slice(0, 2) === "on" && typeof value === "function") {
        node.addEventListener(key.slice(2), value);
      } else if (key === "style") {
        throw new Error("inline styles are not allowed by the page's policy");
      } else {
        node.setAttribute(key, value === true ? "" : String(value));
      }
    });
  }

  function appendAll(node, children) {
    if (children === null || children === undefined) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (child) {
      if (child === null || child === undefined || child === false) return;
      // A list among the children stands for its items.
      if (Array.isArray(child)) return appendAll(node, child);
      node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
    });
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function text(value) {
    return value === null || value === undefined || value === "" ? "—" : String(value);
  }

  function formatTime(iso) {
    if (!iso) return "—";
    var date = new Date(iso);
    if (isNaN(date.getTime())) return String(iso);
    return date.toLocaleString(undefined, {
      year: "numeric",
      month: "short",
      day: "numeric",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
    });
  }

  function timeNode(iso) {
    if (!iso) return document.createTextNode("—");
    return h("time", { datetime: String(iso), title: String(iso) }, formatTime(iso));
  }

  function formatMs(ms) {
    if (ms === null || ms === undefined || typeof ms !== "number" || !isFinite(ms)) return "—";
    if (ms < 1000) return Math.round(ms) + " ms";
    return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  }

  function formatSeconds(s) {
    if (typeof s !== "number") return String(s);
    if (s < 60) return s + " s";
    if (s < 3600) return +(s / 60).toFixed(1) + " min";
    return +(s / 3600).toFixed(1) + " h";
  }

  function hourLabel(iso) {
    var date = new Date(iso);
    if (isNaN(date.getTime())) return String(iso);
    return date.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" });
  }

  /** A datetime-local value (local time) as RFC 3339 in UTC; "" gives null, nonsense NaN. */
  function localToRfc3339(value) {
    if (!value) return null;
    var date = new Date(value);
    if (isNaN(date.getTime())) return NaN;
    return date.toISOString();
  }

  function splitEventTypes(value) {
    var types = String(value || "")
      .split(",")
      .map(function (part) {
        return part.trim();
      })
      .filter(function (part) {
        return part !== "";
      });
    return types.length ? types : ["*"];
  }

  /** Comma-separated names as a list (empty: none). */
  function splitNames(value) {
    return String(value || "")
      .split(",")
      .map(function (part) {
        return part.trim();
      })
      .filter(function (part) {
        return part !== "";
      });
  }

  var ROUTING_FIELDS = ["channels", "filter"];
  var ORDERING_FIELDS = ["ordering", "fifo-batch-size", "fifo-on-dead-letter"];
  // Every field of the endpoint forms whose error is shown beside it.
  var ENDPOINT_FIELDS = ["url", "description", "event-types", "payload-format"]
    .concat(ROUTING_FIELDS)
    .concat(ORDERING_FIELDS);

  /** Shows a form's FIFO options only while FIFO is chosen. */
  function syncOrdering(prefix) {
    $(prefix + "-fifo").hidden = $(prefix + "-ordering").value !== "fifo";
  }

  /**
   * The ordering options chosen in a form: {ordering} for none, with the batch size and what a
   * dead letter does for FIFO; undefined (with the error shown) when the batch size is not a
   * whole number from 1 to 100.
   */
  function typedOrdering(prefix) {
    var ordering = $(prefix + "-ordering").value === "fifo" ? "fifo" : "none";
    if (ordering === "none") return { ordering: "none" };
    var typed = $(prefix + "-fifo-batch-size").value.trim();
    var size = /^[0-9]{1,3}$/.test(typed) ? Number(typed) : NaN;
    if (!(size >= 1 && size <= MAX_BATCH_SIZE)) {
      showFieldError(prefix, {
        field: "fifo_batch_size",
        message: "The batch size is a whole number from 1 to " + MAX_BATCH_SIZE + ".",
      });
      return undefined;
    }
    return {
      ordering: "fifo",
      fifo_batch_size: size,
      fifo_on_dead_letter: $(prefix + "-fifo-on-dead-letter").value === "pause" ? "pause" : "continue",
    };
  }

  /**
   * The filter typed into a form: null when empty, undefined (with the error shown) when it is
   * not JSON.
   */
  function typedFilter(prefix) {
    var text = $(prefix + "-filter").value.trim();
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch (_invalid) {
      showFieldError(prefix, { field: "filter", message: "The filter is not valid JSON." });
      return undefined;
    }
  }

  /** Puts the first example the catalog holds for the preview's event type in its payload, so
   * that a filter can be tried on what the event looks like. */
  async function previewExample(prefix) {
    var result = $(prefix + "-preview-result");
    result.textContent = "";
    var eventType = $(prefix + "-preview-type").value.trim();
    if (!eventType) {
      result.textContent = "Enter the event type whose example to use.";
      return;
    }
    try {
      if (!state.catalog.loaded) await loadCatalog();
    } catch (error) {
      report(error, "The event catalog could not be read");
      return;
    }
    var entry = state.catalog.items.find(function (item) {
      return item.name === eventType;
    });
    var examples = (entry && entry.examples) || [];
    if (!examples.length) {
      result.textContent = "The event catalog holds no example of " + eventType + ".";
      return;
    }
    $(prefix + "-preview-payload").value = JSON.stringify(examples[0], null, 2);
  }

  /** Asks the API whether the form's filter matches the pasted payload, and says so. */
  async function previewFilter(prefix) {
    var result = $(prefix + "-preview-result");
    result.textContent = "";
    var filter;
    var payload;
    try {
      filter = JSON.parse($(prefix + "-filter").value.trim() || "{}");
    } catch (_invalid) {
      result.textContent = "The filter is not valid JSON.";
      return;
    }
    try {
      payload = JSON.parse($(prefix + "-preview-payload").value);
    } catch (_invalid) {
      result.textContent = "The payload is not valid JSON.";
      return;
    }
    var eventType = $(prefix + "-preview-type").value.trim();
    if (!eventType) {
      result.textContent = "Enter the event type to try it with.";
      return;
    }
    var body = { filter: filter, payload: payload, event_type: eventType };
    try {
      var verdict = await api("POST", "v1/filters/test", body, true);
      if (verdict.matches) {
        result.textContent = "Matches: this event would be delivered.";
      } else {
        var failed = verdict.failed || {};
        result.textContent =
          "Does not match: the clause at " +
          (failed.path || "the top") +
          (failed.operator ? " (" + failed.operator + ")" : "") +
          " fails, so this event would not be delivered.";
      }
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        result.textContent = error.message;
      } else {
        report(error, "The filter could not be tried");
      }
    }
  }

  function endpointLabel(id) {
    var endpoint = state.endpointById.get(id);
    return endpoint ? endpoint.url : "Endpoint #" + id;
  }

  function statusBadge(status) {
    return h(
      "span",
      { class: "badge " + (STATUS_BADGES[status] || "badge-neutral"), "data-status": status },
      STATUS_LABELS[status] || text(status)
    );
  }

  /**
   * The endpoint's speed lane: a badge, and in the slow lane why it is there and what it means
   * for its deliveries (they travel apart, so that a slow receiver slows only itself).
   */
  function laneFact(endpoint) {
    var limit = endpoint.in_flight_limit;
    if (endpoint.lane !== "slow") {
      return [
        h("span", { class: "badge badge-ok", testid: "lane-badge" }, "Fast lane"),
        limit ? " at most " + limit + " deliveries in flight at once (its limit)" : null,
      ];
    }
    // Slow without a hold: it has not answered yet, and travels apart until it does.
    var untried = !endpoint.slow_until;
    var why = untried
      ? ["It has not answered yet, so its speed is unknown: its"]
      : ["It answered slowly (or timed out) lately, so until ", timeNode(endpoint.slow_until), " its"];
    var until = untried
      ? " It moves to the fast lane at its first quick answer."
      : " It returns to the fast lane once its answers are quick again.";
    return [
      h("span", { class: "badge badge-warn", testid: "lane-badge" }, "Slow lane"),
      " ",
      h(
        "span",
        { class: "hint", testid: "lane-explanation" },
        why.concat([
          " deliveries travel apart from other endpoints': one at a time, at most " +
            limit +
            " in flight at once." +
            until,
        ])
      ),
    ];
  }

  function enabledBadge(endpoint) {
    if (endpoint.enabled) return h("span", { class: "badge badge-ok" }, "Enabled");
    return h("span", { class: "badge badge-bad" }, "Disabled");
  }

  function plural(count, one, many) {
    return count + " " + (count === 1 ? one : many);
  }

  function isFifo(endpoint) {
    return !!endpoint && endpoint.ordering === "fifo";
  }

  /** Beside the enabled badge in the list: FIFO, and how many of its lines are paused. */
  function orderingBadges(endpoint) {
    var paused = Number(endpoint.paused_lines) || 0;
    return [
      isFifo(endpoint) ? [" ", h("span", { class: "badge badge-neutral", testid: "fifo-badge" }, "FIFO")] : null,
      paused
        ? [
            " ",
            h(
              "span",
              { class: "badge badge-bad", testid: "paused-lines-badge" },
              plural(paused, "line paused", "lines paused")
            ),
          ]
        : null,
    ];
  }

  function orderingFact(endpoint) {
    if (!isFifo(endpoint)) return "none: its messages go concurrently, in no promised order";
    return [
      h("span", { class: "badge badge-neutral" }, "FIFO"),
      " a line per ordering key, each delivered one message at a time in the order the events " +
        "were accepted",
    ];
  }

  function batchFact(endpoint) {
    var size = Number(endpoint.fifo_batch_size) || 1;
    if (size === 1) return "1: one message a request";
    return "up to " + size + " messages of a line a request, as a JSON array";
  }

  function deadLetterFact(endpoint) {
    if (endpoint.fifo_on_dead_letter === "pause") {
      return "pause the line until it is resumed or the dead letter replayed";
    }
    return "continue: the line goes on with the next message";
  }

  function pausedFact(endpoint) {
    var paused = Number(endpoint.paused_lines) || 0;
    if (!paused) return "none";
    return [
      h("span", { class: "badge badge-bad" }, plural(paused, "line", "lines")),
      " at a dead letter: ",
      h(
        "button",
        {
          type: "button",
          class: "linkish",
          testid: "show-paused-lines",
          onclick: function () {
            $("lines-section").scrollIntoView({ block: "start" });
            $("lines-heading").focus();
          },
        },
        paused === 1 ? "show it" : "show them"
      ),
    ];
  }

  // -- status line (aria-live) --------------------------------------------------------------

  function say(message, kind) {
    var box = $("status");
    clear(box);
    if (!message) return;
    box.appendChild(
      h("span", { class: "status-line is-" + (kind || "ok"), testid: "status-line" }, message)
    );
  }

  function report(error, what) {
    if (error instanceof SessionEnded) return;
    var message = error && error.message ? error.message : String(error);
    if (error instanceof ApiError && error.status === 403) {
      message = "This session may not do that: " + message;
    }
    say((what ? what + ": " : "") + message, "error");
  }

  // -- the API ------------------------------------------------------------------------------

  function ApiError(status, body) {
    var detail = (body && body.error) || {};
    this.status = status;
    this.code = detail.code || "http_" + status;
    this.message = detail.message || "the service answered " + (status || "nothing");
    this.field = detail.field || null;
  }
  ApiError.prototype = Object.create(Error.prototype);
  ApiError.prototype.constructor = ApiError;

  function SessionEnded() {
    this.message = ENDED_MESSAGE;
  }
  SessionEnded.prototype = Object.create(Error.prototype);
  SessionEnded.prototype.constructor = SessionEnded;

  async function readJson(response) {
    if (response.status === 204) return null;
    try {
      return await response.json();
    } catch (_ignored) {
      return null;
    }
  }

  async function api(method, path, body, fromRoot) {
    var session = state.session;
    if (!session || expired(session)) {
      endSession();
      throw new SessionEnded();
    }
    var headers = { Authorization: "Bearer " + session.token, Accept: "application/json" };
    var init = {
      method: method,
      headers: headers,
      credentials: "omit",
      cache: "no-store",
      referrerPolicy: "no-referrer",
    };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    var response;
    try {
      // Paths are the application's (/endpoints…), or the API's own when fromRoot (v1/…).
      response = await fetch(fromRoot ? path : state.appPath + path, init);
    } catch (_network) {
      throw new ApiError(0, {
        error: { code: "network", message: "the service could not be reached; try again" },
      });
    }
    if (response.status === 401) {
      endSession();
      throw new SessionEnded();
    }
    var data = await readJson(response);
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }

  // -- session ------------------------------------------------------------------------------

  function linkFromHash() {
    var fragment = location.hash.replace(/^#/, "");
    if (!fragment) return null;
    var parts = fragment.split("&");
    for (var i = 0; i < parts.length; i++) {
      if (parts[i].indexOf("link=") === 0) {
        try {
          return decodeURIComponent(parts[i].slice(5));
        } catch (_bad) {
          return "";
        }
      }
    }
    return null;
  }

  function expired(session) {
    var until = Date.parse(session.expires_at);
    return !isFinite(until) || until <= Date.now();
  }

  function validSession(data) {
    return (
      data &&
      typeof data.token === "string" &&
      data.token !== "" &&
      typeof data.expires_at === "string" &&
      data.application &&
      typeof data.application.uid === "string" &&
      data.application.uid !== ""
    );
  }

  function storeSession(session) {
    try {
      sessionStorage.setItem(STORAGE_KEY, JSON.stringify(session));
    } catch (_unavailable) {
      // Without storage the session lasts as long as this page.
    }
  }

  function loadSession() {
    try {
      var stored = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || "null");
      return validSession(stored) ? stored : null;
    } catch (_bad) {
      return null;
    }
  }

  function forgetSession() {
    try {
      sessionStorage.removeItem(STORAGE_KEY);
    } catch (_unavailable) {
      // Nothing stored, then.
    }
  }

  async function exchange(link) {
    var response;
    try {
      response = await fetch("v1/portal/sessions", {
        method: "POST",
        headers: {
          Authorization: "Bearer " + link,
          "Content-Type": "application/json",
          Accept: "application/json",
        },
        body: "{}",
        credentials: "omit",
        cache: "no-store",
        referrerPolicy: "no-referrer",
      });
    } catch (_network) {
      showEnded("The portal could not reach the service. Check your connection and reload.");
      return null;
    }
    var data = await readJson(response);
    if (response.status === 201 && validSession(data)) {
      return {
        token: data.token,
        expires_at: data.expires_at,
        read_only: data.read_only === true,
        application: {
          id: data.application.id,
          uid: data.application.uid,
          name: typeof data.application.name === "string" ? data.application.name : "",
        },
      };
    }
    if (response.status === 401 || response.status === 403 || response.status === 410) {
      showEnded(ENDED_MESSAGE);
    } else {
      var detail = new ApiError(response.status, data);
      showEnded("The portal could not be opened (" + detail.message + "). Try again later.");
    }
    return null;
  }

  function showEnded(message) {
    state.session = null;
    if (state.expiryTimer !== null) {
      clearTimeout(state.expiryTimer);
      state.expiryTimer = null;
    }
    // No secret stays in the page once the session is over.
    ["created-secret-value", "secret-value"].forEach(function (id) {
      $(id).value = "";
    });
    $("created-secret").hidden = true;
    $("secret-shown").hidden = true;
    $("main").hidden = true;
    $("loading").hidden = true;
    $("app-uid").textContent = "";
    $("session-expiry").textContent = "";
    $("read-only-badge").hidden = true;
    say("");
    $("ended-message").textContent = message;
    $("ended").hidden = false;
  }

  function endSession() {
    forgetSession();
    showEnded(ENDED_MESSAGE);
  }

  async function boot() {
    var link = linkFromHash();
    if (location.hash) {
      // The link is a credential: out of the address bar and the history at once.
      history.replaceState(null, "", location.pathname + location.search);
    }
    var session;
    if (link !== null) {
      // A new link replaces whatever session this tab had.
      forgetSession();
      if (!link) {
        showEnded(ENDED_MESSAGE);
        return;
      }
      session = await exchange(link);
      if (!session) return;
      storeSession(session);
    } else {
      session = loadSession();
    }
    if (!session || expired(session)) {
      endSession();
      return;
    }
    start(session);
  }

  function start(session) {
    state.session = session;
    state.readOnly = session.read_only === true;
    state.appPath = "v1/apps/" + encodeURIComponent(session.application.uid);
    var app = session.application;
    var name = app.name || app.uid;
    $("app-name").textContent = name;
    $("app-uid").textContent = app.uid;
    document.title = name + " · Webhooks";
    $("session-expiry").textContent = "";
    $("session-expiry").appendChild(document.createTextNode("Session expires "));
    $("session-expiry").appendChild(timeNode(session.expires_at));
    if (state.readOnly) {
      document.body.classList.add("read-only");
      document.querySelectorAll("[data-write]").forEach(function (node) {
        node.hidden = true;
      });
      $("read-only-badge").hidden = false;
      $("secret-read-only-note").hidden = false;
    }
    var left = Date.parse(session.expires_at) - Date.now();
    state.expiryTimer = setTimeout(endSession, Math.max(0, Math.min(left, MAX_TIMER_MS)));
    $("loading").hidden = true;
    $("ended").hidden = true;
    $("main").hidden = false;
    selectTab("endpoints", false);
    // The catalog offers its types in the endpoint forms; without it they stay free text.
    loadCatalog().catch(reportAs("Event catalog"));
  }

  // -- tabs ---------------------------------------------------------------------------------

  function tabs() {
    return Array.prototype.slice.call(document.querySelectorAll('#tablist [role="tab"]'));
  }

  function selectTab(name, focus) {
    tabs().forEach(function (tab) {
      var selected = tab.getAttribute("data-tab") === name;
      tab.setAttribute("aria-selected", selected ? "true" : "false");
      tab.tabIndex = selected ? 0 : -1;
      $(tab.getAttribute("aria-controls")).hidden = !selected;
      if (selected && focus) tab.focus();
    });
    state.tab = name;
    if (name === "endpoints") {
      if (!$("endpoints-list-view").hidden) loadEndpoints(true).catch(reportAs("Endpoints"));
    } else if (name === "deliveries") {
      withEndpoints(function () {
        if (!$("deliveries-list-view").hidden) return loadDeliveries(true);
        return null;
      }).catch(reportAs("Deliveries"));
    } else if (name === "dead-letters") {
      withEndpoints(function () {
        return loadDead(true);
      }).catch(reportAs("Dead letters"));
    } else if (name === "health") {
      withEndpoints(loadHealth).catch(reportAs("Health"));
    } else if (name === "catalog") {
      loadCatalog().catch(reportAs("Event catalog"));
    }
  }

  function reportAs(what) {
    return function (error) {
      report(error, what);
    };
  }

  /** Runs ``then`` once the endpoints are known (their URLs label messages and selects). */
  async function withEndpoints(then) {
    if (!state.endpointsLoaded) await loadEndpoints(true);
    return then();
  }

  function onTabKey(event) {
    var all = tabs();
    var index = all.indexOf(document.activeElement);
    if (index < 0) return;
    var next = null;
    if (event.key === "ArrowRight" || event.key === "ArrowDown") next = (index + 1) % all.length;
    else if (event.key === "ArrowLeft" || event.key === "ArrowUp")
      next = (index - 1 + all.length) % all.length;
    else if (event.key === "Home") next = 0;
    else if (event.key === "End") next = all.length - 1;
    if (next === null) return;
    event.preventDefault();
    selectTab(all[next].getAttribute("data-tab"), true);
  }

  // -- endpoints ----------------------------------------------------------------------------

  async function loadEndpoints(reset) {
    var query = new URLSearchParams({ limit: String(ENDPOINT_PAGE) });
    if (!reset && state.endpointsCursor) query.set("cursor", state.endpointsCursor);
    var page = await api("GET", "/endpoints?" + query.toString());
    if (reset) state.endpoints = [];
    state.endpoints = state.endpoints.concat(page.items || []);
    state.endpointsCursor = page.next_cursor || null;
    state.endpointsLoaded = true;
    state.endpointById = new Map();
    state.endpoints.forEach(function (endpoint) {
      state.endpointById.set(endpoint.id, endpoint);
    });
    renderEndpoints();
    fillEndpointSelects();
  }

  function renderEndpoints() {
    var body = $("endpoints-body");
    clear(body);
    state.endpoints.forEach(function (endpoint) {
      body.appendChild(
        h("tr", { "data-endpoint-id": endpoint.id, testid: "endpoint-row" }, [
          h(
            "td",
            { class: "url-cell" },
            h(
              "button",
              {
                type: "button",
                class: "linkish",
                testid: "endpoint-open",
                "data-endpoint-id": endpoint.id,
                onclick: function () {
                  openEndpoint(endpoint.id);
                },
              },
              endpoint.url
            )
          ),
          h("td", { testid: "endpoint-description" }, text(endpoint.description)),
          h("td", { class: "break" }, (endpoint.event_types || []).join(", ")),
          h("td", null, [enabledBadge(endpoint), orderingBadges(endpoint)]),
          h("td", { class: "nowrap" }, timeNode(endpoint.created_at)),
        ])
      );
    });
    $("endpoints-empty").hidden = state.endpoints.length > 0;
    $("endpoints-more").hidden = !state.endpointsCursor;
  }

  function fillEndpointSelects() {
    ["filter-endpoint", "dead-filter-endpoint", "replay-endpoint"].forEach(function (id) {
      var select = $(id);
      var current = select.value;
      while (select.options.length > 1) select.remove(1);
      state.endpoints.forEach(function (endpoint) {
        var label = endpoint.url + (endpoint.description ? " (" + endpoint.description + ")" : "");
        select.appendChild(h("option", { value: String(endpoint.id) }, label));
      });
      select.value = state.endpointById.has(Number(current)) ? current : "";
    });
  }

  function clearFieldErrors(prefix, fields) {
    fields.forEach(function (field) {
      var box = $(prefix + "-" + field + "-error");
      if (box) {
        box.textContent = "";
        box.hidden = true;
      }
      var input = $(prefix + "-" + field);
      if (input) input.removeAttribute("aria-invalid");
    });
    var general = $(prefix + "-form-error");
    if (general) {
      general.textContent = "";
      general.hidden = true;
    }
  }

  /** Shows an API error next to its field when the form has that field, else under the form. */
  function showFieldError(prefix, error) {
    // An element of a list field (channels[0]) is shown at the field.
    var name = error.field ? String(error.field).replace(/\[.*$/, "").replace(/_/g, "-") : "";
    var box = name ? $(prefix + "-" + name + "-error") : null;
    var input = name ? $(prefix + "-" + name) : null;
    if (!box) box = $(prefix + "-form-error");
    box.textContent = error.message;
    box.hidden = false;
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }

  function toggleNewEndpointForm(show) {
    var form = $("new-endpoint-form");
    form.hidden = !show;
    $("add-endpoint").setAttribute("aria-expanded", show ? "true" : "false");
    clearFieldErrors("new-endpoint", ENDPOINT_FIELDS);
    $("new-endpoint-preview-result").textContent = "";
    if (show) {
      $("created-secret").hidden = true;
      $("created-secret-value").value = "";
      $("new-endpoint-url").focus();
    } else {
      form.reset();
    }
    syncTypePicker("new-endpoint");
    syncOrdering("new-endpoint");
  }

  async function createEndpoint(event) {
    event.preventDefault();
    clearFieldErrors("new-endpoint", ENDPOINT_FIELDS);
    var url = $("new-endpoint-url").value.trim();
    if (!url) {
      showFieldError("new-endpoint", { field: "url", message: "Enter the endpoint's URL." });
      return;
    }
    var body = {
      url: url,
      description: $("new-endpoint-description").value,
      event_types: splitEventTypes($("new-endpoint-event-types").value),
    };
    // Left out unless chosen: the endpoint then gets its application's default.
    var payloadFormat = $("new-endpoint-payload-format").value;
    if (payloadFormat) body.payload_format = payloadFormat;
    var filter = typedFilter("new-endpoint");
    if (filter === undefined) return;
    if (filter !== null) body.filter = filter;
    var channels = splitNames($("new-endpoint-channels").value);
    if (channels.length) body.channels = channels;
    // Left out for none, the default; FIFO comes with its two options.
    var ordering = typedOrdering("new-endpoint");
    if (ordering === undefined) return;
    if (ordering.ordering === "fifo") Object.assign(body, ordering);
    var button = $("new-endpoint-submit");
    button.disabled = true;
    try {
      var created = await api("POST", "/endpoints", body);
      toggleNewEndpointForm(false);
      $("created-secret-value").value = created.secret || "";
      $("created-secret").hidden = false;
      say("Endpoint created. Copy its signing secret now.", "ok");
      await loadEndpoints(true);
      $("created-secret-value").focus();
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        showFieldError("new-endpoint", error);
      } else {
        report(error, "The endpoint was not created");
      }
    } finally {
      button.disabled = false;
    }
  }

  function showEndpointList() {
    $("endpoint-detail").hidden = true;
    $("endpoints-list-view").hidden = false;
    hideSecret();
    state.endpoint = null;
  }

  async function openEndpoint(id) {
    try {
      var endpoint = await api("GET", "/endpoints/" + encodeURIComponent(id));
      if (state.tab !== "endpoints") selectTab("endpoints", false);
      $("endpoints-list-view").hidden = true;
      $("endpoint-detail").hidden = false;
      $("created-secret").hidden = true;
      $("created-secret-value").value = "";
      $("endpoint-delete-confirm").hidden = true;
      $("rotate-confirm").hidden = true;
      $("recover-result").textContent = "";
      clearFieldErrors("edit-endpoint", ENDPOINT_FIELDS);
      clearFieldErrors("recover", ["since", "until"]);
      clearFieldErrors("credentials", ["headers", "auth"]);
      resetCredentialsForm();
      hideSecret();
      $("lines-filter").value = "";
      state.lines = { items: [], cursor: null, pausedOnly: false };
      clear($("lines-body"));
      renderEndpoint(endpoint, true);
      $("endpoint-title").focus();
      loadEndpointHealth(endpoint).catch(reportAs("Health"));
      refreshLines(endpoint);
    } catch (error) {
      report(error, "The endpoint could not be opened");
    }
  }

  function renderEndpoint(endpoint, fillForm) {
    state.endpoint = endpoint;
    state.endpointById.set(endpoint.id, endpoint);
    $("endpoint-title").textContent = endpoint.url;
    $("endpoint-title").tabIndex = -1;
    var facts = $("endpoint-facts");
    clear(facts);
    var schedule = (endpoint.retry_schedule || []).map(formatSeconds).join(", ");
    var source = endpoint.retry_schedule_source
      ? " (" + String(endpoint.retry_schedule_source).replace(/_/g, " ") + ")"
      : "";
    var rows = [
      ["Endpoint ID", String(endpoint.id)],
      ["URL", endpoint.url],
      ["Description", text(endpoint.description)],
      [
        "State",
        [
          enabledBadge(endpoint),
          endpoint.enabled
            ? null
            : " " + text(endpoint.disabled_reason) + (endpoint.disabled_at ? ", " : ""),
          endpoint.enabled || !endpoint.disabled_at ? null : timeNode(endpoint.disabled_at),
        ],
      ],
      ["Event types", (endpoint.event_types || []).join(", ")],
      ["Channels", (endpoint.channels || []).join(", ") || "none: every event of its types"],
      ["Filter", endpoint.filter ? JSON.stringify(endpoint.filter) : "none"],
      ["Body", endpoint.payload_format === "envelope" ? "envelope" : "raw"],
      ["Ordering", orderingFact(endpoint)],
      isFifo(endpoint) ? ["Batch size", batchFact(endpoint)] : null,
      isFifo(endpoint) ? ["On a dead letter", deadLetterFact(endpoint)] : null,
      isFifo(endpoint) || endpoint.paused_lines ? ["Paused lines", pausedFact(endpoint)] : null,
      ["Retry schedule", schedule ? schedule + source : "—"],
      ["Timeout", endpoint.timeout_ms ? formatMs(endpoint.timeout_ms) : "default"],
      ["Rate limit", endpoint.rate_limit_per_s ? endpoint.rate_limit_per_s + " per second" : "none"],
      ["Max in flight", endpoint.max_in_flight ? String(endpoint.max_in_flight) : "none of its own"],
      ["Lane", laneFact(endpoint)],
      ["Static headers", credentialHeaders(endpoint.headers)],
      ["Authorization", credentialAuth(endpoint.auth)],
      [
        "Client certificate",
        endpoint.tls_client_certificate
          ? [
              endpoint.tls_client_certificate.subject + ", expires ",
              timeNode(endpoint.tls_client_certificate.not_after),
            ]
          : "none",
      ],
      [
        "Server CA",
        endpoint.tls_server_ca ? (endpoint.tls_server_ca.subjects || []).join("; ") : "public roots",
      ],
      ["Previous secret valid until", timeNode(endpoint.previous_secret_expires_at)],
      ["Created", timeNode(endpoint.created_at)],
      ["Updated", timeNode(endpoint.updated_at)],
    ];
    rows.forEach(function (row) {
      if (!row) return;
      facts.appendChild(h("dt", null, row[0]));
      facts.appendChild(h("dd", { testid: "fact-" + row[0].toLowerCase().replace(/ /g, "-") }, row[1]));
    });
    $("endpoint-toggle").textContent = endpoint.enabled ? "Disable" : "Enable";
    // Lines are shown for a FIFO endpoint, and for one switched away while some are paused.
    $("lines-section").hidden = !(isFifo(endpoint) || endpoint.paused_lines);
    if (fillForm) {
      $("edit-endpoint-url").value = endpoint.url;
      $("edit-endpoint-description").value = endpoint.description || "";
      $("edit-endpoint-event-types").value = (endpoint.event_types || []).join(", ");
      $("edit-endpoint-payload-format").value = endpoint.payload_format || "raw";
      $("edit-endpoint-channels").value = (endpoint.channels || []).join(", ");
      $("edit-endpoint-filter").value = endpoint.filter ? JSON.stringify(endpoint.filter, null, 2) : "";
      $("edit-endpoint-preview-result").textContent = "";
      $("edit-endpoint-ordering").value = isFifo(endpoint) ? "fifo" : "none";
      $("edit-endpoint-fifo-batch-size").value = String(endpoint.fifo_batch_size || 1);
      $("edit-endpoint-fifo-on-dead-letter").value =
        endpoint.fifo_on_dead_letter === "pause" ? "pause" : "continue";
      syncOrdering("edit-endpoint");
      syncTypePicker("edit-endpoint");
    }
    $("send-example-result").textContent = "";
  }

  /** The redacted static headers, as the API shows them (never a value in clear). */
  function credentialHeaders(headers) {
    if (!headers) return "none";
    return Object.keys(headers)
      .map(function (name) {
        return name + ": " + headers[name];
      })
      .join(", ");
  }

  function credentialAuth(auth) {
    if (!auth) return "none";
    if (auth.type === "basic") return "HTTP Basic (" + auth.username + ")";
    if (auth.type === "bearer") return "Bearer token " + auth.token;
    if (auth.type === "oauth2_client_credentials") {
      return "OAuth2 client credentials (" + auth.client_id + " at " + auth.token_url + ")";
    }
    return String(auth.type);
  }

  var CREDENTIAL_INPUTS = [
    "headers",
    "username",
    "password",
    "token",
    "token-url",
    "client-id",
    "client-secret",
    "scope",
    "certificate",
    "key",
    "server-ca",
  ];

  function showAuthFields() {
    var kind = $("credentials-auth").value;
    $("credentials-basic").hidden = kind !== "basic";
    $("credentials-bearer").hidden = kind !== "bearer";
    $("credentials-oauth2").hidden = kind !== "oauth2_client_credentials";
  }

  /** Empties the credentials form: what was typed is never kept or shown back. */
  function resetCredentialsForm() {
    CREDENTIAL_INPUTS.forEach(function (name) {
      $("credentials-" + name).value = "";
    });
    ["headers", "certificate", "server-ca"].forEach(function (name) {
      $("credentials-remove-" + name).checked = false;
    });
    $("credentials-auth").value = "";
    showAuthFields();
  }

  function credentialChanges() {
    var changes = {};
    var lines = $("credentials-headers").value.split("\n").filter(function (line) {
      return line.trim() !== "";
    });
    if ($("credentials-remove-headers").checked) {
      changes.headers = null;
    } else if (lines.length) {
      changes.headers = {};
      lines.forEach(function (line) {
        var colon = line.indexOf(":");
        if (colon < 1) throw { field: "headers", message: "Write each header as Name: value." };
        changes.headers[line.slice(0, colon).trim()] = line.slice(colon + 1).trim();
      });
    }
    var kind = $("credentials-auth").value;
    if (kind === "remove") changes.auth = null;
    if (kind === "basic") {
      changes.auth = {
        type: "basic",
        username: $("credentials-username").value,
        password: $("credentials-password").value,
      };
    }
    if (kind === "bearer") changes.auth = { type: "bearer", token: $("credentials-token").value };
    if (kind === "oauth2_client_credentials") {
      changes.auth = {
        type: kind,
        token_url: $("credentials-token-url").value.trim(),
        client_id: $("credentials-client-id").value,
        client_secret: $("credentials-client-secret").value,
        scope: $("credentials-scope").value.trim() || null,
      };
    }
    var certificate = $("credentials-certificate").value;
    var key = $("credentials-key").value;
    if ($("credentials-remove-certificate").checked) {
      changes.tls_client_certificate = null;
    } else if (certificate.trim() || key.trim()) {
      changes.tls_client_certificate = { certificate_pem: certificate, private_key_pem: key };
    }
    if ($("credentials-remove-server-ca").checked) {
      changes.tls_server_ca_pem = null;
    } else if ($("credentials-server-ca").value.trim()) {
      changes.tls_server_ca_pem = $("credentials-server-ca").value;
    }
    return changes;
  }

  async function saveCredentials(event) {
    event.preventDefault();
    var endpoint = state.endpoint;
    if (!endpoint) return;
    clearFieldErrors("credentials", ["headers", "auth"]);
    var changes;
    try {
      changes = credentialChanges();
    } catch (problem) {
      showFieldError("credentials", problem);
      return;
    }
    if (!Object.keys(changes).length) {
      showFieldError("credentials", { message: "Nothing to change." });
      return;
    }
    var button = $("credentials-submit");
    button.disabled = true;
    try {
      var updated = await api("PATCH", "/endpoints/" + endpoint.id, changes);
      resetCredentialsForm();
      renderEndpoint(updated, false);
      say("Credentials saved.", "ok");
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        showFieldError("credentials", error);
      } else {
        report(error, "The credentials were not saved");
      }
    } finally {
      button.disabled = false;
    }
  }

  async function saveEndpoint(event) {
    event.preventDefault();
    var endpoint = state.endpoint;
    if (!endpoint) return;
    clearFieldErrors("edit-endpoint", ENDPOINT_FIELDS);
    var url = $("edit-endpoint-url").value.trim();
    if (!url) {
      showFieldError("edit-endpoint", { field: "url", message: "Enter the endpoint's URL." });
      return;
    }
    var changes = {
      url: url,
      description: $("edit-endpoint-description").value,
      event_types: splitEventTypes($("edit-endpoint-event-types").value),
      payload_format: $("edit-endpoint-payload-format").value,
      // Empty fields remove the filter and the channels.
      channels: splitNames($("edit-endpoint-channels").value),
    };
    var filter = typedFilter("edit-endpoint");
    if (filter === undefined) return;
    changes.filter = filter;
    // Only the ordering options that changed: setting the ordering moves the messages not yet
    // attempted into (or out of) lines; the FIFO options stay as they are while it is none.
    var ordering = typedOrdering("edit-endpoint");
    if (ordering === undefined) return;
    if (ordering.ordering !== (isFifo(endpoint) ? "fifo" : "none")) changes.ordering = ordering.ordering;
    if (ordering.ordering === "fifo") {
      if (ordering.fifo_batch_size !== endpoint.fifo_batch_size) {
        changes.fifo_batch_size = ordering.fifo_batch_size;
      }
      if (ordering.fifo_on_dead_letter !== endpoint.fifo_on_dead_letter) {
        changes.fifo_on_dead_letter = ordering.fifo_on_dead_letter;
      }
    }
    var button = $("edit-endpoint-submit");
    button.disabled = true;
    try {
      var updated = await api("PATCH", "/endpoints/" + endpoint.id, changes);
      renderEndpoint(updated, true);
      say("Changes saved.", "ok");
      if ("ordering" in changes) refreshLines(updated);
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) {
        showFieldError("edit-endpoint", error);
      } else {
        report(error, "The changes were not saved");
      }
    } finally {
      button.disabled = false;
    }
  }

  async function toggleEndpoint() {
    var endpoint = state.endpoint;
    if (!endpoint) return;
    var button = $("endpoint-toggle");
    button.disabled = true;
    try {
      var updated = await api("PATCH", "/endpoints/" + endpoint.id, { enabled: !endpoint.enabled });
      renderEndpoint(updated, false);
      say(updated.enabled ? "Endpoint enabled." : "Endpoint disabled.", "ok");
    } catch (error) {
      report(error, "The endpoint was not changed");
    } finally {
      button.disabled = false;
    }
  }

  async function deleteEndpoint() {
    var endpoint = state.endpoint;
    if (!endpoint) return;
    try {
      await api("DELETE", "/endpoints/" + endpoint.id);
      $("endpoint-delete-confirm").hidden = true;
      showEndpointList();
      say("Endpoint deleted.", "ok");
      await loadEndpoints(true);
      $("add-endpoint").focus();
    } catch (error) {
      report(error, "The endpoint was not deleted");
    }
  }

  function showSecret(secret, label, note) {
    $("secret-value-label").textContent = label;
    $("secret-value").value = secret;
    $("secret-note").textContent = note;
    $("secret-shown").hidden = false;
  }

  function hideSecret() {
    $("secret-value").value = "";
    $("secret-note").textContent = "";
    $("secret-shown").hidden = true;
  }

  async function revealSecret() {
    var endpoint = state.endpoint;
    if (!endpoint) return;
    try {
      var answer = await api("GET", "/endpoints/" + endpoint.id + "/secret");
      $("rotate-confirm").hidden = true;
      showSecret(answer.secret, "Signing secret", "Keep it private: anyone with it can sign webhooks.");
      $("secret-value").focus();
      say("Secret revealed.", "info");
    } catch (error) {
      report(error, "The secret could not be revealed");
    }
  }

  async function rotateSecret() {
    var endpoint = state.endpoint;
    if (!endpoint) return;
    var button = $("rotate-yes");
    button.disabled = true;
    try {
      var answer = await api("POST", "/endpoints/" + endpoint.id + "/rotate-secret", {});
      $("rotate-confirm").hidden = true;
      var note = answer.previous_secret_expires_at
        ? "The previous secret stays valid until " +
          formatTime(answer.previous_secret_expires_at) +
          "."
        : "The previous secret is no longer valid.";
      showSecret(answer.secret, "New signing secret", note);
      $("secret-value").focus();
      say("Secret rotated. Update your receiver with the new secret.", "ok");
      try {
        renderEndpoint(await api("GET", "/endpoints/" + endpoint.id), false);
      } catch (error) {
        report(error, "The endpoint could not be refreshed");
      }
    } catch (error) {
      report(error, "The secret was not rotated");
    } finally {
      button.disabled = false;
    }
  }

  async function copyFrom(input) {
    var value = input.value;
    if (!value) return;
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await Promise.race([
          navigator.clipboard.writeText(value),
          new Promise(function (_resolve, reject) {
            setTimeout(reject, 1500);
          }),
        ]);
        say("Copied to the clipboard.", "ok");
        return;
      } catch (_denied) {
        // Fall back to selecting the text.
      }
    }
    input.focus();
    input.select();
    input.setSelectionRange(0, value.length);
    say("The text is selected: press Ctrl+C (⌘C on a Mac) to copy it.", "info");
  }

  async function recover(event) {
    event.preventDefault();
    var endpoint = state.endpoint;
    if (!endpoint) return;
    clearFieldErrors("recover", ["since", "until"]);
    $("recover-result").textContent = "";
    var since = localToRfc3339($("recover-since").value);
    var until = localToRfc3339($("recover-until").value);
    if (!since || since !== since) {
      showFieldError("recover", { field: "since", message: "Choose when the window starts." });
      return;
    }
    if (until !== null && until !== until) {
      showFieldError("recover", { field: "until", message: "Enter a valid date and time." });
      return;
    }
    var body = { since: since };
    if (until) body.until = until;
    var button = $("recover-submit");
    button.disabled = true;
    try {
      var answer = await api("POST", "/endpoints/" + endpoint.id + "/recover", body);
      var message = answer.requeued + " requeued";
      if (answer.complete === false) message += " (not finished: recover again to continue)";
      $("recover-result").textContent = message;
      say(message, "ok");
    } catch (error) {
      if (error instanceof ApiError && error.status === 422) showFieldError("recover", error);
      else report(error, "Nothing was recovered");
    } finally {
      button.disabled = false;
    }
  }

  // -- FIFO lines ---------------------------------------------------------------------------

  // Each load of lines takes a number: only the latest one's answer is drawn.
  var lineLoads = 0;

  /** The open endpoint's lines, loaded again when it has any to show. */
  function refreshLines(endpoint) {
    if (!(isFifo(endpoint) || endpoint.paused_lines)) {
      lineLoads += 1;
      state.lines = { items: [], cursor: null, pausedOnly: false };
      clear($("lines-body"));
      return;
    }
    loadLines(endpoint.id, true).catch(reportAs("FIFO lines"));
  }

  async function loadLines(endpointId, reset) {
    var pausedOnly = $("lines-filter").value === "paused";
    var query = new URLSearchParams({ limit: String(LINE_PAGE) });
    if (pausedOnly) query.set("paused", "true");
    if (!reset && state.lines.cursor) query.set("cursor", state.lines.cursor);
    var ticket = ++lineLoads;
    var page = await api("GET", "/endpoints/" + encodeURIComponent(endpointId) + "/lines?" + query.toString());
    // Another endpoint opened, or a later load begun, meanwhile: that one is drawn.
    if (ticket !== lineLoads || !state.endpoint || state.endpoint.id !== endpointId) return;
    var items = reset ? [] : state.lines.items;
    state.lines = {
      items: items.concat(page.items || []),
      cursor: page.next_cursor || null,
      pausedOnly: pausedOnly,
    };
    renderLines();
    // Which load the table shows: a reader can tell a refresh has been drawn.
    $("lines-section").setAttribute("data-loads", String(ticket));
  }

  function renderLines() {
    var lines = state.lines;
    // Paused lines first; otherwise in the API's order, by ordering key.
    var sorted = lines.items.slice().sort(function (a, b) {
      return (b.paused_at ? 1 : 0) - (a.paused_at ? 1 : 0);
    });
    var body = $("lines-body");
    clear(body);
    sorted.forEach(function (line) {
      body.appendChild(lineRow(line));
    });
    var shown = sorted.filter(function (line) {
      return !!line.paused_at;
    }).length;
    // The endpoint counts every paused line, also those not loaded yet.
    var paused = Math.max(Number(state.endpoint && state.endpoint.paused_lines) || 0, shown);
    var empty = $("lines-empty");
    empty.textContent = lines.pausedOnly ? "No line is paused." : "No line has a message on its way.";
    empty.hidden = sorted.length > 0;
    $("lines-more").hidden = !lines.cursor;
    var all = $("lines-resume-all");
    all.hidden = paused === 0;
    all.textContent = paused > 1 ? "Resume all paused lines (" + paused + ")" : "Resume the paused line";
    var note = $("lines-paused-note");
    note.hidden = paused === 0;
    note.textContent = !paused
      ? ""
      : paused === 1
        ? "1 line is paused at a dead letter: nothing more of it is sent until it is resumed or " +
          "its dead letter replayed."
        : paused +
          " lines are paused at a dead letter: nothing more of them is sent until they are " +
          "resumed or their dead letters replayed.";
  }

  function lineName(key) {
    return key === null || key === undefined
      ? "the line of events without an ordering key"
      : 'the line of ordering key "' + key + '"';
  }

  function waitingCount(count) {
    var n = Number(count) || 0;
    return n >= WAITING_COUNT_LIMIT ? WAITING_COUNT_LIMIT + " or more" : String(n);
  }

  function lineRow(line) {
    var key = line.ordering_key === undefined ? null : line.ordering_key;
    var paused = !!line.paused_at;
    var retrying =
      !paused &&
      line.head_next_attempt_at &&
      (line.head_status === "failed" || line.head_status === "pending");
    var cells = [
      h(
        "td",
        { class: "break", testid: "line-key" },
        key === null
          ? h("span", { class: "no-key", title: "Events sent without an ordering key share this line" }, "no key")
          : h("span", { class: "mono" }, key)
      ),
      h(
        "td",
        { class: "nowrap", testid: "line-head" },
        line.head_message_id ? messageButton({ id: line.head_message_id }) : "—"
      ),
      h("td", { testid: "line-status" }, [
        line.head_status ? statusBadge(line.head_status) : "—",
        paused ? [" ", h("span", { class: "badge badge-bad", testid: "line-paused-badge" }, "Line paused")] : null,
        retrying
          ? h("span", { class: "line-next hint" }, ["next attempt ", timeNode(line.head_next_attempt_at)])
          : null,
      ]),
      h("td", { testid: "line-attempts" }, text(line.head_attempts)),
      h("td", { testid: "line-waiting" }, waitingCount(line.waiting)),
      h("td", { class: "nowrap", testid: "line-paused-at" }, paused ? timeNode(line.paused_at) : "—"),
    ];
    if (!state.readOnly) {
      cells.push(
        h(
          "td",
          null,
          paused
            ? h(
                "button",
                {
                  type: "button",
                  class: "btn btn-small",
                  testid: "line-resume",
                  "aria-label": "Resume " + lineName(key),
                  onclick: function (event) {
                    resumeLines([key], event.currentTarget);
                  },
                },
                "Resume"
              )
            : null
        )
      );
    }
    return h(
      "tr",
      {
        class: paused ? "is-paused" : null,
        testid: "line-row",
        "data-ordering-key": key,
        "data-keyless": key === null ? "true" : null,
        "data-paused": paused ? "true" : "false",
      },
      cells
    );
  }

  function resumedMessage(keys, resumed) {
    if (!resumed.length) {
      return keys && keys.length === 1
        ? "Nothing to resume: " + lineName(keys[0]) + " is not paused."
        : "Nothing to resume: no line is paused.";
    }
    if (resumed.length === 1) {
      var name = lineName(resumed[0]);
      return name.charAt(0).toUpperCase() + name.slice(1) + " is resumed.";
    }
    return resumed.length + " lines are resumed.";
  }

  /** Resumes the open endpoint's paused lines (keys: their ordering keys; null: all of them),
   * then shows the endpoint and its lines as they are now. */
  async function resumeLines(keys, button) {
    var endpoint = state.endpoint;
    if (!endpoint) return;
    var body = keys === null ? {} : { ordering_keys: keys };
    if (button) button.disabled = true;
    try {
      var answer = await api("POST", "/endpoints/" + endpoint.id + "/lines/resume", body);
      var resumed = answer.resumed || [];
      say(resumedMessage(keys, resumed), resumed.length ? "ok" : "info");
      await reloadEndpoint(endpoint.id);
      var next = $("lines-resume-all");
      (next.hidden ? $("lines-refresh") : next).focus();
    } catch (error) {
      report(error, "Nothing was resumed");
    } finally {
      if (button) button.disabled = false;
    }
  }

  /** The open endpoint's facts and lines, read again (the form keeps what is typed). */
  async function reloadEndpoint(id) {
    var fresh = await api("GET", "/endpoints/" + encodeURIComponent(id));
    if (!state.endpoint || state.endpoint.id !== id) return;
    renderEndpoint(fresh, false);
    if (isFifo(fresh) || fresh.paused_lines) {
      await loadLines(id, true);
    } else {
      refreshLines(fresh);
    }
  }


  // -- event catalog ------------------------------------------------------------------------

  /** Loads the catalog; a call while a load is under way waits for that one. */
  function loadCatalog() {
    if (!state.catalog.loading) {
      state.catalog.loading = fetchCatalog().finally(function () {
        state.catalog.loading = null;
      });
    }
    return state.catalog.loading;
  }

  async function fetchCatalog() {
    var items = [];
    var cursor = null;
    do {
      var query = new URLSearchParams({ limit: String(CATALOG_PAGE) });
      if (cursor) query.set("cursor", cursor);
      // The catalog is the deployment's, not the application's.
      var page = await api("GET", "v1/event-types?" + query.toString(), undefined, true);
      items = items.concat(page.items || []);
      cursor = page.next_cursor || null;
    } while (cursor);
    state.catalog.items = items.filter(function (entry) {
      return !entry.archived;
    });
    state.catalog.loaded = true;
    renderCatalog();
    renderTypePicker("new-endpoint");
    renderTypePicker("edit-endpoint");
    fillSendExample();
  }

  function renderCatalog() {
    var list = $("catalog-list");
    clear(list);
    state.catalog.items.forEach(function (entry) {
      list.appendChild(catalogCard(entry));
    });
    $("catalog-empty").hidden = state.catalog.items.length > 0;
  }

  function catalogCard(entry) {
    var examples = entry.examples || [];
    return h(
      "article",
      { class: "card catalog-entry", testid: "catalog-entry", "data-event-type": entry.name },
      [
        h("h3", { class: "mono break" }, [
          entry.name,
          entry.deprecated
            ? [" ", h("span", { class: "badge badge-warn", testid: "deprecated-badge" }, "deprecated")]
            : null,
        ]),
        h("p", { testid: "catalog-description" }, text(entry.description)),
        h("h4", null, "Payload"),
        schemaView(entry.schema),
        examples.length ? h("h4", null, examples.length > 1 ? "Examples" : "Example") : null,
        examples.map(function (example) {
          return h("pre", { class: "code", tabindex: "0", testid: "catalog-example" }, pretty(example));
        }),
        h("p", { class: "hint" }, "Version " + entry.version + " of its schema"),
      ]
    );
  }

  function pretty(value) {
    try {
      return JSON.stringify(value, null, 2);
    } catch (_cycle) {
      return String(value);
    }
  }

  /** A schema as a table of its fields (dotted paths into objects, [] into arrays), with the
   * schema itself beneath, folded. */
  function schemaView(schema) {
    if (schema === null || schema === undefined) {
      return h("p", { class: "hint", testid: "catalog-no-schema" }, "No schema is given for this event type.");
    }
    var rows = [];
    schemaRows(schema, schema, "", true, 0, rows);
    var table = rows.length
      ? h("div", { class: "table-wrap" }, [
          h("table", { class: "table schema-table", testid: "catalog-fields" }, [
            h("thead", null, h("tr", null, [
              h("th", { scope: "col" }, "Field"),
              h("th", { scope: "col" }, "Type"),
              h("th", { scope: "col" }, "Required"),
              h("th", { scope: "col" }, "Description"),
            ])),
            h("tbody", null, rows.map(function (row) {
              return h("tr", { testid: "catalog-field", "data-field": row.path }, [
                h("td", { class: "mono break" }, row.path),
                h("td", null, row.type),
                h("td", null, row.required ? "yes" : "no"),
                h("td", { class: "break" }, text(row.description)),
              ]);
            })),
          ]),
        ])
      : h("p", null, "Type: " + describeType(schema, schema));
    return h("div", { class: "schema" }, [
      table,
      h("details", null, [
        h("summary", null, "JSON Schema"),
        h("pre", { class: "code", tabindex: "0", testid: "catalog-schema" }, pretty(schema)),
      ]),
    ]);
  }

  /** The schema a local reference ("#/$defs/…") points at, else the schema itself. */
  function resolved(root, schema) {
    var seen = 0;
    while (schema && typeof schema === "object" && typeof schema.$ref === "string" && seen < 8) {
      var ref = schema.$ref;
      if (ref.indexOf("#/") !== 0) return schema;
      var found = root;
      ref.slice(2).split("/").forEach(function (part) {
        var key = part.replace(/~1/g, "/").replace(/~0/g, "~");
        found = found && typeof found === "object" ? found[key] : undefined;
      });
      if (found === undefined) return schema;
      schema = found;
      seen += 1;
    }
    return schema;
  }

  function schemaRows(root, schema, prefix, required, depth, rows) {
    schema = resolved(root, schema);
    if (!schema || typeof schema !== "object" || depth > SCHEMA_DEPTH) return;
    var properties = schema.properties;
    if (properties && typeof properties === "object") {
      var needed = Array.isArray(schema.required) ? schema.required : [];
      Object.keys(properties).forEach(function (name) {
        var child = resolved(root, properties[name]);
        var path = prefix ? prefix + "." + name : name;
        rows.push({
          path: path,
          type: describeType(root, child),
          required: needed.indexOf(name) >= 0,
          description: child && typeof child === "object" ? child.description : null,
        });
        schemaRows(root, child, path, needed.indexOf(name) >= 0, depth + 1, rows);
      });
    } else if (schema.items && typeof schema.items === "object" && prefix) {
      schemaRows(root, schema.items, prefix + "[]", required, depth + 1, rows);
    }
  }

  function describeType(root, schema) {
    schema = resolved(root, schema);
    if (schema === true) return "anything";
    if (!schema || typeof schema !== "object") return "—";
    if (Object.prototype.hasOwnProperty.call(schema, "const")) return "exactly " + JSON.stringify(schema.const);
    if (Array.isArray(schema.enum)) {
      return "one of " + schema.enum.map(function (v) { return JSON.stringify(v); }).join(", ");
    }
    var type = Array.isArray(schema.type) ? schema.type.join(" or ") : schema.type;
    if (type === "array" && schema.items && typeof schema.items === "object") {
      return "array of " + describeType(root, schema.items);
    }
    var choices = schema.oneOf || schema.anyOf;
    if (!type && Array.isArray(choices)) {
      return choices.map(function (choice) { return describeType(root, choice); }).join(" or ");
    }
    return (type || "any") + (schema.format ? " (" + schema.format + ")" : "");
  }

  /** The catalog's types as check boxes beside an endpoint form's event types, which stay free
   * text (and the only way while the catalog is empty). */
  function renderTypePicker(prefix) {
    var options = $(prefix + "-type-options");
    clear(options);
    state.catalog.items.forEach(function (entry) {
      var id = prefix + "-type-" + entry.name;
      options.appendChild(
        h("span", { class: "type-option" }, [
          h("input", {
            type: "checkbox",
            id: id,
            value: entry.name,
            testid: "type-option",
            "data-event-type": entry.name,
            onchange: function (event) {
              pickType(prefix, entry.name, event.target.checked);
            },
          }),
          " ",
          h("label", { for: id, class: "mono", title: entry.description || "" }, entry.name),
        ])
      );
    });
    $(prefix + "-type-picker").hidden = state.catalog.items.length === 0;
    syncTypePicker(prefix);
  }

  function chosenTypes(prefix) {
    return splitEventTypes($(prefix + "-event-types").value).filter(function (type) {
      return type !== "*";
    });
  }

  function pickType(prefix, name, picked) {
    var types = chosenTypes(prefix).filter(function (type) {
      return type !== name;
    });
    if (picked) types.push(name);
    $(prefix + "-event-types").value = types.join(", ");
  }

  function syncTypePicker(prefix) {
    var types = chosenTypes(prefix);
    document.querySelectorAll("#" + prefix + "-type-options input").forEach(function (box) {
      box.checked = types.indexOf(box.value) >= 0;
    });
  }

  function fillSendExample() {
    var select = $("send-example-type");
    var kept = select.value;
    clear(select);
    var usable = state.catalog.items.filter(function (entry) {
      return (entry.examples || []).length > 0;
    });
    usable.forEach(function (entry) {
      select.appendChild(h("option", { value: entry.name }, entry.name));
    });
    if (kept) select.value = kept;
    $("send-example-form").hidden = state.readOnly || usable.length === 0;
  }

  async function sendExample(event) {
    event.preventDefault();
    var endpoint = state.endpoint;
    var type = $("send-example-type").value;
    if (!endpoint || !type) return;
    var button = $("send-example-submit");
    var result = $("send-example-result");
    button.disabled = true;
    result.textContent = "";
    try {
      var sent = await api("POST", "/endpoints/" + endpoint.id + "/send-example", { event_type: type });
      var id = (sent.message_ids || [])[0];
      result.appendChild(document.createTextNode("Sent " + type + " as "));
      result.appendChild(messageButton({ id: id, event_type: type }));
      say("Example of " + type + " sent to the endpoint.", "ok");
    } catch (error) {
      report(error, "The example was not sent");
    } finally {
      button.disabled = false;
    }
  }

  // -- deliveries ---------------------------------------------------------------------------

  function readDeliveryFilter() {
    var filter = {};
    var endpointId = $("filter-endpoint").value;
    var status = $("filter-status").value;
    var eventType = $("filter-event-type").value.trim();
    var since = localToRfc3339($("filter-since").value);
    var until = localToRfc3339($("filter-until").value);
    if (since !== since || until !== until) return null;
    if (endpointId) filter.endpoint_id = endpointId;
    if (status) filter.status = status;
    if (eventType) filter.event_type = eventType;
    if (since) filter.since = since;
    if (until) filter.until = until;
    return filter;
  }

  async function loadDeliveries(reset) {
    if (reset) state.deliveries.cursor = null;
    var query = new URLSearchParams(state.deliveries.filter);
    query.set("limit", String(MESSAGE_PAGE));
    if (state.deliveries.cursor) query.set("cursor", state.deliveries.cursor);
    var page = await api("GET", "/messages?" + query.toString());
    var body = $("deliveries-body");
    if (reset) clear(body);
    (page.items || []).forEach(function (message) {
      body.appendChild(deliveryRow(message));
    });
    state.deliveries.cursor = page.next_cursor || null;
    state.deliveries.loaded = true;
    $("deliveries-empty").hidden = body.children.length > 0;
    $("deliveries-more").hidden = !state.deliveries.cursor;
  }

  function lastAnswer(message) {
    if (message.last_status_code) {
      return "HTTP " + message.last_status_code + " · " + formatMs(message.last_response_ms);
    }
    return text(message.last_error);
  }

  function messageButton(message) {
    return h(
      "button",
      {
        type: "button",
        class: "linkish",
        testid: "message-open",
        "data-message-id": message.id,
        "aria-label": "Message " + message.id + (message.event_type ? ", " + message.event_type : ""),
        onclick: function () {
          openMessage(message.id);
        },
      },
      "#" + message.id
    );
  }

  function deliveryRow(message) {
    return h(
      "tr",
      { testid: "delivery-row", "data-message-id": message.id, "data-status": message.status },
      [
        h("td", { class: "nowrap" }, messageButton(message)),
        h("td", { class: "break" }, [
          message.event_type,
          message.example
            ? [" ", h("span", { class: "badge badge-info", testid: "example-badge" }, "example")]
            : null,
        ]),
        h("td", null, statusBadge(message.status)),
        h(
          "td",
          { class: "nowrap" },
          String(message.attempts) + (message.max_attempts ? " / " + message.max_attempts : "")
        ),
        h("td", { class: "url-cell" }, endpointLabel(message.endpoint_id)),
        h("td", { class: "nowrap" }, timeNode(message.created_at)),
        h("td", { class: "break" }, lastAnswer(message)),
      ]
    );
  }

  function showDeliveryList() {
    $("message-detail").hidden = true;
    $("deliveries-list-view").hidden = false;
    state.message = null;
  }

  async function openMessage(id) {
    try {
      var message = await api("GET", "/messages/" + encodeURIComponent(id));
      if (state.tab !== "deliveries") {
        $("deliveries-list-view").hidden = true;
        selectTab("deliveries", false);
      }
      $("deliveries-list-view").hidden = true;
      $("message-detail").hidden = false;
      renderMessage(message);
      $("message-title").focus();
    } catch (error) {
      report(error, "The message could not be opened");
    }
  }

  function renderMessage(message) {
    state.message = message;
    $("message-title").textContent = "Message #" + message.id;
    $("message-title").tabIndex = -1;
    var facts = $("message-facts");
    clear(facts);
    var rows = [
      ["Status", statusBadge(message.status)],
      ["Event type", message.event_type],
      ["Event ID", message.event_id],
      ["Sent as", message.example ? "An example from the event catalog" : "An event"],
      ["Endpoint", endpointLabel(message.endpoint_id)],
      orderingKeyFact(message),
      [
        "Attempts",
        String(message.attempts) + (message.max_attempts ? " of " + message.max_attempts : ""),
      ],
      ["Created", timeNode(message.created_at)],
      ["Next attempt", nextAttemptFact(message)],
      ["Delivered", timeNode(message.delivered_at)],
      ["Dead-lettered", timeNode(message.dead_lettered_at)],
      ["Last error", text(message.last_error)],
    ];
    rows.forEach(function (row) {
      if (!row) return;
      facts.appendChild(h("dt", null, row[0]));
      facts.appendChild(h("dd", { testid: "fact-" + row[0].toLowerCase().replace(/[ -]/g, "-") }, row[1]));
    });
    var waiting = message.waiting_for;
    var box = $("message-waiting");
    box.textContent = waiting && waiting.explanation ? sentence(waiting.explanation) : "";
    if (waiting && waiting.reason) box.setAttribute("data-reason", waiting.reason);
    else box.removeAttribute("data-reason");
    $("message-resume-line").hidden = !(waiting && waiting.reason === "line_paused");

    var body = $("attempts-body");
    clear(body);
    (message.attempt_history || []).forEach(function (attempt) {
      body.appendChild(
        h("tr", { testid: "attempt-row", "data-attempt": attempt.attempt_number }, [
          h("td", null, String(attempt.attempt_number)),
          h("td", { class: "nowrap" }, timeNode(attempt.attempted_at)),
          h("td", { testid: "attempt-status-code" }, text(attempt.status_code)),
          h("td", { class: "nowrap" }, formatMs(attempt.response_ms)),
          h("td", null, text(attempt.error_class)),
          h("td", { class: "excerpt" }, text(attempt.response_excerpt)),
        ])
      );
    });
    $("attempts-empty").hidden = body.children.length > 0;
    var payload;
    try {
      payload = JSON.stringify(message.payload, null, 2);
    } catch (_cycle) {
      payload = String(message.payload);
    }
    $("message-payload").textContent = payload === undefined ? "" : payload;
  }

  /** The event's ordering key: shown when it has one, or when its endpoint keeps lines. */
  function orderingKeyFact(message) {
    var key = message.ordering_key;
    var hasKey = key !== null && key !== undefined;
    if (!hasKey && !isFifo(state.endpointById.get(message.endpoint_id))) return null;
    return [
      "Ordering key",
      hasKey
        ? h("span", { class: "mono" }, key)
        : h("span", { class: "no-key" }, "no key (the line of events without one)"),
    ];
  }

  function nextAttemptFact(message) {
    if (message.status === "delivered" || message.status === "dead_letter") return "—";
    if (message.status === "waiting") return "once the messages before it in its line are done";
    return timeNode(message.next_attempt_at);
  }

  /** An explanation as a sentence: its first letter capitalised, a full stop at its end. */
  function sentence(value) {
    var words = String(value).trim();
    if (!words) return "";
    words = words.charAt(0).toUpperCase() + words.slice(1);
    return /[.!?]$/.test(words) ? words : words + ".";
  }

  /** Resumes the paused line a waiting message is in, and shows the message again. */
  async function resumeMessageLine() {
    var message = state.message;
    if (!message) return;
    var key = message.ordering_key === undefined ? null : message.ordering_key;
    var button = $("message-resume-line");
    button.disabled = true;
    try {
      var answer = await api("POST", "/endpoints/" + message.endpoint_id + "/lines/resume", {
        ordering_keys: [key],
      });
      var resumed = answer.resumed || [];
      say(resumedMessage([key], resumed), resumed.length ? "ok" : "info");
      renderMessage(await api("GET", "/messages/" + message.id));
      $("message-refresh").focus();
    } catch (error) {
      report(error, "The line was not resumed");
    } finally {
      button.disabled = false;
    }
  }

  async function resendMessage() {
    var message = state.message;
    if (!message) return;
    var button = $("message-resend");
    button.disabled = true;
    try {
      await api("POST", "/messages/" + message.id + "/resend");
      say("Message #" + message.id + " will be sent again.", "ok");
      renderMessage(await api("GET", "/messages/" + message.id));
    } catch (error) {
      report(error, "The message was not sent again");
    } finally {
      button.disabled = false;
    }
  }

  // -- dead letters -------------------------------------------------------------------------

  async function loadDead(reset) {
    var dead = state.dead;
    if (reset) {
      dead.cursor = null;
      dead.items = [];
      dead.selected.clear();
    }
    var query = new URLSearchParams({ status: "dead_letter", limit: String(MESSAGE_PAGE) });
    if (dead.endpointId) query.set("endpoint_id", dead.endpointId);
    if (dead.cursor) query.set("cursor", dead.cursor);
    var page = await api("GET", "/messages?" + query.toString());
    dead.items = dead.items.concat(page.items || []);
    dead.cursor = page.next_cursor || null;
    renderDead();
  }

  function renderDead() {
    var dead = state.dead;
    var body = $("dead-body");
    clear(body);
    dead.items.forEach(function (message) {
      var cells = [];
      if (!state.readOnly) {
        cells.push(
          h(
            "td",
            { class: "check-col" },
            h("input", {
              type: "checkbox",
              class: "dead-check",
              testid: "dead-check",
              "data-message-id": message.id,
              "aria-label": "Select message " + message.id,
              checked: dead.selected.has(message.id),
              onchange: function (event) {
                if (event.target.checked) dead.selected.add(message.id);
                else dead.selected.delete(message.id);
                updateSelection();
              },
            })
          )
        );
      }
      cells.push(
        h("td", { class: "nowrap" }, messageButton(message)),
        h("td", { class: "break" }, message.event_type),
        h("td", { class: "url-cell" }, endpointLabel(message.endpoint_id)),
        h("td", { class: "nowrap" }, timeNode(message.dead_lettered_at)),
        h("td", null, String(message.attempts)),
        h("td", { class: "break" }, lastAnswer(message))
      );
      if (!state.readOnly) {
        cells.push(
          h(
            "td",
            null,
            h(
              "button",
              {
                type: "button",
                class: "btn btn-small",
                testid: "dead-replay",
                "data-message-id": message.id,
                "aria-label": "Replay message " + message.id,
                onclick: function () {
                  replay({ message_ids: [message.id] });
                },
              },
              "Replay"
            )
          )
        );
      }
      body.appendChild(
        h("tr", { testid: "dead-row", "data-message-id": message.id }, cells)
      );
    });
    $("dead-empty").hidden = dead.items.length > 0;
    $("dead-more").hidden = !dead.cursor;
    updateSelection();
  }

  function updateSelection() {
    var count = state.dead.selected.size;
    var button = $("replay-selected");
    button.disabled = count === 0;
    button.textContent = count ? "Replay selected (" + count + ")" : "Replay selected";
    var all = $("dead-select-all");
    all.checked = count > 0 && count === state.dead.items.length;
    all.indeterminate = count > 0 && count < state.dead.items.length;
  }

  async function replay(body) {
    var result = $("dead-letters-result");
    result.textContent = "";
    try {
      var answer = await api("POST", "/dead-letters/replay", body);
      var message = answer.requeued + " requeued";
      result.textContent = message;
      say(message, "ok");
      await loadDead(true);
      return true;
    } catch (error) {
      report(error, "Nothing was replayed");
      return false;
    }
  }

  async function replayWindow(event) {
    event.preventDefault();
    var box = $("replay-window-error");
    box.hidden = true;
    box.textContent = "";
    var body = {};
    var endpointId = $("replay-endpoint").value;
    var since = localToRfc3339($("replay-since").value);
    var until = localToRfc3339($("replay-until").value);
    if (since !== since || until !== until) {
      box.textContent = "Enter valid dates and times.";
      box.hidden = false;
      return;
    }
    if (endpointId) body.endpoint_id = Number(endpointId);
    if (since) body.since = since;
    if (until) body.until = until;
    if (!Object.keys(body).length) {
      box.textContent = "Choose an endpoint or a time window.";
      box.hidden = false;
      return;
    }
    var button = $("replay-window-submit");
    button.disabled = true;
    try {
      await replay(body);
    } finally {
      button.disabled = false;
    }
  }

  // -- health -------------------------------------------------------------------------------

  async function loadHealth() {
    var cards = $("health-cards");
    var endpoints = state.endpoints.slice();
    $("health-empty").hidden = endpoints.length > 0;
    var built = [];
    for (var i = 0; i < endpoints.length; i++) {
      var endpoint = endpoints[i];
      var health = await api("GET", "/endpoints/" + endpoint.id + "/health");
      built.push(
        h("article", { class: "card health-card", testid: "health-card", "data-endpoint-id": endpoint.id }, [
          h("h3", null, endpoint.url),
          endpoint.description ? h("p", { class: "hint" }, endpoint.description) : null,
          healthBody(endpoint, health),
        ])
      );
    }
    clear(cards);
    appendAll(cards, built);
  }

  async function loadEndpointHealth(endpoint) {
    var box = $("endpoint-health");
    clear(box);
    var health = await api("GET", "/endpoints/" + endpoint.id + "/health");
    if (state.endpoint && state.endpoint.id === endpoint.id) box.appendChild(healthBody(endpoint, health));
  }

  function healthTotals(hourly) {
    var delivered = 0;
    var failed = 0;
    (hourly || []).forEach(function (bucket) {
      delivered += Number(bucket.delivered) || 0;
      failed += Number(bucket.failed) || 0;
    });
    return { delivered: delivered, failed: failed };
  }

  function successRate(totals) {
    var all = totals.delivered + totals.failed;
    if (!all) return "—";
    var rate = (totals.delivered / all) * 100;
    return (rate === 100 || rate === 0 ? rate.toFixed(0) : rate.toFixed(1)) + " %";
  }

  function metric(label, value, testid) {
    return h("div", { class: "metric" }, [
      h("span", { class: "metric-label" }, label),
      h("span", { class: "metric-value", testid: testid }, value),
    ]);
  }

  function healthBody(endpoint, health) {
    var circuit = CIRCUIT[health.circuit_state] || [text(health.circuit_state), "badge-neutral"];
    var totals = healthTotals(health.hourly);
    var counts = health.counts || {};
    var countText = Object.keys(counts)
      .filter(function (key) {
        return counts[key];
      })
      .map(function (key) {
        return (STATUS_LABELS[key] || key).toLowerCase() + " " + counts[key];
      })
      .join(" · ");
    return h("div", { class: "health-body" }, [
      h("p", { class: "app-meta" }, [
        h("span", { class: "badge " + circuit[1], testid: "circuit-state", "data-circuit": health.circuit_state }, circuit[0]),
        endpoint.enabled ? null : h("span", { class: "badge badge-neutral" }, "Disabled"),
      ]),
      h("div", { class: "metrics" }, [
        metric("Success", successRate(totals), "success-rate"),
        metric("p50", formatMs(health.p50_ms), "p50"),
        metric("p95", formatMs(health.p95_ms), "p95"),
        metric("p99", formatMs(health.p99_ms), "p99"),
      ]),
      hourlyChart(health.hourly, totals),
      h("p", { class: "health-foot" }, [
        "Failures in a row: " + health.consecutive_failures + " of " + health.failure_threshold,
        " · Last success: ",
        timeNode(health.last_success_at),
        " · Last failure: ",
        timeNode(health.last_failure_at),
      ]),
      countText ? h("p", { class: "health-foot" }, "Messages now: " + countText) : null,
    ]);
  }

  function hourlyChart(hourly, totals) {
    if (!Array.isArray(hourly) || !hourly.length) {
      return h("p", { class: "hint", testid: "hourly-chart-missing" }, "No hourly figures.");
    }
    var width = 240;
    var height = 60;
    var slot = width / hourly.length;
    var max = 1;
    var busiest = null;
    hourly.forEach(function (bucket) {
      var total = (Number(bucket.delivered) || 0) + (Number(bucket.failed) || 0);
      if (total > max) max = total;
      if (total > 0 && (!busiest || total > busiest.total)) busiest = { hour: bucket.hour, total: total };
    });
    var summary =
      "Last 24 hours: " + totals.delivered + " delivered, " + totals.failed + " failed" +
      (busiest ? "; busiest hour " + hourLabel(busiest.hour) + " with " + busiest.total : "") +
      ".";
    var chart = svg(
      "svg",
      {
        class: "chart",
        viewBox: "0 0 " + width + " " + height,
        preserveAspectRatio: "none",
        role: "img",
        "aria-label": summary,
        focusable: "false",
        testid: "hourly-chart",
      },
      svg("title", null, summary)
    );
    hourly.forEach(function (bucket, index) {
      var delivered = Number(bucket.delivered) || 0;
      var failed = Number(bucket.failed) || 0;
      var x = index * slot + slot * 0.1;
      var w = slot * 0.8;
      var group = svg("g", { "data-hour": bucket.hour }, [
        svg("title", null, hourLabel(bucket.hour) + ": " + delivered + " delivered, " + failed + " failed"),
      ]);
      if (!delivered && !failed) {
        group.appendChild(svg("rect", { class: "bar-empty", x: x, y: height - 1, width: w, height: 1 }));
      }
      var hd = (delivered / max) * (height - 2);
      var hf = (failed / max) * (height - 2);
      if (delivered) {
        group.appendChild(svg("rect", { class: "bar-delivered", x: x, y: height - hd, width: w, height: hd }));
      }
      if (failed) {
        group.appendChild(svg("rect", { class: "bar-failed", x: x, y: height - hd - hf, width: w, height: hf }));
      }
      chart.appendChild(group);
    });
    return h("figure", { class: "chart-figure" }, [
      chart,
      h("figcaption", { class: "chart-legend" }, [
        h("span", null, [h("span", { class: "swatch swatch-delivered", "aria-hidden": "true" }), "Delivered " + totals.delivered]),
        h("span", null, [h("span", { class: "swatch swatch-failed", "aria-hidden": "true" }), "Failed " + totals.failed]),
        h("span", null, "per hour, last 24 hours"),
      ]),
    ]);
  }

  // -- wiring -------------------------------------------------------------------------------

  function wire() {
    $("tablist").addEventListener("keydown", onTabKey);
    tabs().forEach(function (tab) {
      tab.addEventListener("click", function () {
        selectTab(tab.getAttribute("data-tab"), true);
      });
    });

    $("add-endpoint").addEventListener("click", function () {
      toggleNewEndpointForm($("new-endpoint-form").hidden);
    });
    $("new-endpoint-cancel").addEventListener("click", function () {
      toggleNewEndpointForm(false);
      $("add-endpoint").focus();
    });
    $("new-endpoint-form").addEventListener("submit", createEndpoint);
    $("created-secret-done").addEventListener("click", function () {
      $("created-secret-value").value = "";
      $("created-secret").hidden = true;
      say("");
      $("add-endpoint").focus();
    });
    $("endpoints-more").addEventListener("click", function () {
      loadEndpoints(false).catch(reportAs("Endpoints"));
    });

    $("endpoint-back").addEventListener("click", function () {
      showEndpointList();
      loadEndpoints(true).catch(reportAs("Endpoints"));
    });
    $("endpoint-toggle").addEventListener("click", toggleEndpoint);
    $("endpoint-delete").addEventListener("click", function () {
      $("endpoint-delete-confirm").hidden = false;
      $("endpoint-delete-no").focus();
    });
    $("endpoint-delete-no").addEventListener("click", function () {
      $("endpoint-delete-confirm").hidden = true;
      $("endpoint-delete").focus();
    });
    $("endpoint-delete-yes").addEventListener("click", deleteEndpoint);
    $("endpoint-show-deliveries").addEventListener("click", function () {
      if (!state.endpoint) return;
      $("deliveries-filter").reset();
      $("filter-endpoint").value = String(state.endpoint.id);
      state.deliveries.filter = { endpoint_id: String(state.endpoint.id) };
      showDeliveryList();
      selectTab("deliveries", true);
    });
    $("reveal-secret").addEventListener("click", revealSecret);
    $("rotate-secret").addEventListener("click", function () {
      $("rotate-confirm").hidden = false;
      $("rotate-no").focus();
    });
    $("rotate-no").addEventListener("click", function () {
      $("rotate-confirm").hidden = true;
      $("rotate-secret").focus();
    });
    $("rotate-yes").addEventListener("click", rotateSecret);
    $("secret-hide").addEventListener("click", function () {
      hideSecret();
      $("reveal-secret").focus();
    });
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        copyFrom($(button.getAttribute("data-copy")));
      });
    });
    $("edit-endpoint-form").addEventListener("submit", saveEndpoint);
    ["new-endpoint", "edit-endpoint"].forEach(function (prefix) {
      $(prefix + "-ordering").addEventListener("change", function () {
        syncOrdering(prefix);
      });
      // A batch size being corrected is no longer shown as refused.
      $(prefix + "-fifo-batch-size").addEventListener("input", function (event) {
        var box = $(prefix + "-fifo-batch-size-error");
        box.textContent = "";
        box.hidden = true;
        event.target.removeAttribute("aria-invalid");
      });
    });
    $("lines-filter").addEventListener("change", function () {
      if (state.endpoint) loadLines(state.endpoint.id, true).catch(reportAs("FIFO lines"));
    });
    $("lines-refresh").addEventListener("click", function () {
      if (state.endpoint) reloadEndpoint(state.endpoint.id).catch(reportAs("FIFO lines"));
    });
    $("lines-more").addEventListener("click", function () {
      if (state.endpoint) loadLines(state.endpoint.id, false).catch(reportAs("FIFO lines"));
    });
    $("lines-resume-all").addEventListener("click", function (event) {
      resumeLines(null, event.currentTarget);
    });
    ["new-endpoint", "edit-endpoint"].forEach(function (prefix) {
      $(prefix + "-preview-run").addEventListener("click", function () {
        previewFilter(prefix);
      });
      $(prefix + "-preview-example").addEventListener("click", function () {
        previewExample(prefix);
      });
    });
    $("credentials-form").addEventListener("submit", saveCredentials);
    $("credentials-auth").addEventListener("change", showAuthFields);
    $("recover-form").addEventListener("submit", recover);

    $("deliveries-filter").addEventListener("submit", function (event) {
      event.preventDefault();
      var filter = readDeliveryFilter();
      if (filter === null) {
        say("Enter valid dates and times.", "error");
        return;
      }
      state.deliveries.filter = filter;
      loadDeliveries(true).catch(reportAs("Deliveries"));
    });
    $("filter-reset").addEventListener("click", function () {
      $("deliveries-filter").reset();
      state.deliveries.filter = {};
      loadDeliveries(true).catch(reportAs("Deliveries"));
    });
    $("deliveries-refresh").addEventListener("click", function () {
      loadDeliveries(true).catch(reportAs("Deliveries"));
    });
    $("deliveries-more").addEventListener("click", function () {
      loadDeliveries(false).catch(reportAs("Deliveries"));
    });
    $("message-back").addEventListener("click", function () {
      showDeliveryList();
      loadDeliveries(true).catch(reportAs("Deliveries"));
    });
    $("message-refresh").addEventListener("click", function () {
      if (!state.message) return;
      api("GET", "/messages/" + state.message.id)
        .then(renderMessage)
        .catch(reportAs("The message could not be refreshed"));
    });
    $("message-resend").addEventListener("click", resendMessage);
    $("message-resume-line").addEventListener("click", resumeMessageLine);

    $("dead-filter").addEventListener("submit", function (event) {
      event.preventDefault();
      state.dead.endpointId = $("dead-filter-endpoint").value;
      loadDead(true).catch(reportAs("Dead letters"));
    });
    $("dead-letters-refresh").addEventListener("click", function () {
      loadDead(true).catch(reportAs("Dead letters"));
    });
    $("dead-more").addEventListener("click", function () {
      loadDead(false).catch(reportAs("Dead letters"));
    });
    $("dead-select-all").addEventListener("change", function (event) {
      var dead = state.dead;
      dead.selected.clear();
      if (event.target.checked) {
        dead.items.forEach(function (message) {
          dead.selected.add(message.id);
        });
      }
      document.querySelectorAll(".dead-check").forEach(function (box) {
        box.checked = event.target.checked;
      });
      updateSelection();
    });
    $("replay-selected").addEventListener("click", function () {
      var ids = Array.from(state.dead.selected);
      if (ids.length) replay({ message_ids: ids });
    });
    $("replay-window-form").addEventListener("submit", replayWindow);

    $("catalog-refresh").addEventListener("click", function () {
      loadCatalog().catch(reportAs("Event catalog"));
    });
    ["new-endpoint", "edit-endpoint"].forEach(function (prefix) {
      $(prefix + "-event-types").addEventListener("input", function () {
        syncTypePicker(prefix);
      });
    });
    $("send-example-form").addEventListener("submit", sendExample);

    $("health-refresh").addEventListener("click", function () {
      loadEndpoints(true).then(loadHealth).catch(reportAs("Health"));
    });

    // A new link opened in this tab (the fragment changes, the page does not reload).
    window.addEventListener("hashchange", function () {
      if (linkFromHash() !== null) location.reload();
    });
  }

  function main() {
    wire();
    boot().catch(function (error) {
      showEnded("The portal could not be opened: " + (error && error.message ? error.message : error));
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
