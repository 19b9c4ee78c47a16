// The API reference: renders this server's /api/v1/openapi.json as plain DOM (text only, never
// HTML from the document), so the page needs no inline script or style and no other origin.
"use strict";

(function () {
  let doc = null;

  // The labels this script writes, in the page's language (`<html lang>`, set by the server);
  // the OpenAPI document's own texts (summaries, descriptions) stay as written, in English.
  const TEXTS = {
    id: {
      reference: "Referensi {title}",
      version: "Versi {version}",
      failed: "Deskripsi API tidak dapat dimuat: {error}",
      parameters: "Parameter",
      name: "Nama",
      where: "Letak",
      type: "Jenis",
      rules: "Aturan",
      body: "Isi permintaan ({type}, {need})",
      needed: "wajib",
      optional: "opsional",
      responses: "Jawaban",
      headers: "Header: {names}",
      required: "wajib",
      bearer: "token bearer",
      open: "publik",
      arrayOf: "larik berisi {type}",
      oneOf: "salah satu dari {values}",
      pattern: "pola {pattern}",
      minLength: "panjang min {n}",
      maxLength: "panjang maks {n}",
      min: "minimal {n}",
      max: "maksimal {n}",
      maxItems: "paling banyak {n} butir",
      byDefault: "bawaan {value}",
      deprecated: "usang",
    },
    en: {
      reference: "{title} reference",
      version: "Version {version}",
      failed: "The API description could not be loaded: {error}",
      parameters: "Parameters",
      name: "Name",
      where: "In",
      type: "Type",
      rules: "Rules",
      body: "Request body ({type}, {need})",
      needed: "required",
      optional: "optional",
      responses: "Responses",
      headers: "Headers: {names}",
      required: "required",
      bearer: "bearer token",
      open: "public",
      arrayOf: "array of {type}",
      oneOf: "one of {values}",
      pattern: "pattern {pattern}",
      minLength: "min length {n}",
      maxLength: "max length {n}",
      min: "min {n}",
      max: "max {n}",
      maxItems: "at most {n} items",
      byDefault: "default {value}",
      deprecated: "deprecated",
    },
  };
  const LANG = TEXTS[document.documentElement.lang] ? document.documentElement.lang : "en";

  // A label with its {placeholders} filled in (as text: the page never parses it as HTML).
  function t(key, values) {
    return TEXTS[LANG][key].replace(/\{(\w+)\}/g, (all, name) =>
      (values && name in values ? String(values[name]) : all));
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) {
      if (child !== null && child !== undefined) {
        node.append(typeof child === "string" ? document.createTextNode(child) : child);
      }
    }
    return node;
  }

  function resolve(schema) {
    let seen = 0;
    while (schema && schema.$ref && seen < 20) {
      const parts = schema.$ref.replace(/^#\//, "").split("/");
      schema = parts.reduce((node, key) => (node ? node[key] : undefined), doc);
      seen += 1;
    }
    return schema || {};
  }

  function refName(schema) {
    return schema && schema.$ref ? schema.$ref.split("/").pop() : null;
  }

  function typeLabel(schema) {
    const name = refName(schema);
    schema = resolve(schema);
    if (schema.anyOf) return schema.anyOf.map(typeLabel).join(" | ");
    if (schema.const !== undefined) return JSON.stringify(schema.const);
    if (schema.type === "array") return t("arrayOf", {type: typeLabel(schema.items || {})});
    let label = schema.type || "any";
    if (schema.format) label += " (" + schema.format + ")";
    return name ? name + " " + label : label;
  }

  function rules(schema) {
    schema = resolve(schema);
    const out = [];
    if (schema.enum) out.push(t("oneOf", {values: schema.enum.join(", ")}));
    if (schema.pattern) out.push(t("pattern", {pattern: schema.pattern}));
    if (schema.minLength !== undefined) out.push(t("minLength", {n: schema.minLength}));
    if (schema.maxLength !== undefined) out.push(t("maxLength", {n: schema.maxLength}));
    if (schema.minimum !== undefined) out.push(t("min", {n: schema.minimum}));
    if (schema.maximum !== undefined) out.push(t("max", {n: schema.maximum}));
    if (schema.maxItems !== undefined) out.push(t("maxItems", {n: schema.maxItems}));
    if (schema.default !== undefined) out.push(t("byDefault", {value: JSON.stringify(schema.default)}));
    if (schema.deprecated) out.push(t("deprecated"));
    if (schema.description) out.push(schema.description);
    return out.join("; ");
  }

  function schemaTree(schema, depth) {
    const target = resolve(schema);
    let object = target;
    if (target.type === "array") object = resolve(target.items || {});
    if (object.type !== "object" || !object.properties || depth > 4) {
      return el("span", {}, [el("span", {class: "schema", text: typeLabel(schema)}), " ",
        el("span", {class: "rule", text: rules(schema)})]);
    }
    const required = new Set(object.required || []);
    const list = el("ul", {class: "props"});
    for (const [name, prop] of Object.entries(object.properties)) {
      const nested = resolve(prop);
      const inner = nested.type === "object" || (nested.type === "array" &&
        resolve(nested.items || {}).type === "object");
      list.append(el("li", {}, [
        el("code", {text: name}), " ",
        el("span", {class: "schema", text: typeLabel(prop)}), " ",
        required.has(name) ? el("span", {class: "req", text: t("required")}) : null, " ",
        el("span", {class: "rule", text: rules(prop)}),
        inner ? schemaTree(prop, depth + 1) : null,
      ]));
    }
    return target.type === "array" ? el("div", {}, [el("span", {class: "schema", text: typeLabel(schema)}), list]) : list;
  }

  function parameters(op) {
    if (!op.parameters || !op.parameters.length) return null;
    const body = el("tbody");
    for (const p of op.parameters) {
      body.append(el("tr", {}, [
        el("td", {}, [el("code", {text: p.name}), p.required ? el("span", {class: "req", text: " " + t("required")}) : null]),
        el("td", {text: p.in}),
        el("td", {}, [el("span", {class: "schema", text: typeLabel(p.schema || {})})]),
        el("td", {class: "rule", text: [p.description, rules(p.schema || {})].filter(Boolean).join("; ")}),
      ]));
    }
    return el("div", {}, [el("h4", {text: t("parameters")}),
      el("table", {}, [el("thead", {}, [el("tr", {}, [t("name"), t("where"), t("type"), t("rules")].map((h) => el("th", {text: h})))]), body])]);
  }

  function requestBody(op) {
    if (!op.requestBody) return null;
    const content = op.requestBody.content || {};
    const type = Object.keys(content)[0];
    return el("div", {}, [
      el("h4", {text: t("body", {type, need: t(op.requestBody.required ? "needed" : "optional")})}),
      schemaTree(content[type].schema || {}, 0),
    ]);
  }

  function responses(op) {
    const body = el("tbody");
    for (const [status, answer] of Object.entries(op.responses || {})) {
      const content = answer.content || {};
      const cells = Object.entries(content).map(([type, media]) =>
        el("div", {}, [el("span", {class: "rule", text: type + " "}), schemaTree(media.schema || {}, 1)]));
      const headers = Object.keys(answer.headers || {}).filter((h) => h !== "X-Request-Id");
      body.append(el("tr", {}, [
        el("td", {class: "status", text: status}),
        el("td", {}, [answer.description || "",
          headers.length ? el("div", {class: "rule", text: t("headers", {names: headers.join(", ")})}) : null]),
        el("td", {}, cells),
      ]));
    }
    return el("div", {}, [el("h4", {text: t("responses")}), el("table", {}, [body])]);
  }

  function render() {
    document.title = doc.info.title + " " + doc.info.version;
    document.getElementById("title").textContent = t("reference", {title: doc.info.title});
    const meta = document.getElementById("meta");
    meta.textContent = "";
    meta.append(t("version", {version: doc.info.version}) + " · OpenAPI " + doc.openapi + " · ",
      el("a", {href: "/api/v1/openapi.json", text: "openapi.json"}), " · ", doc.info.description || "");
    const byTag = new Map();
    let index = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const tag = (op.tags || ["other"])[0];
        if (!byTag.has(tag)) byTag.set(tag, []);
        byTag.get(tag).push({path, method, op, id: "op-" + (op.operationId || index)});
        index += 1;
      }
    }
    const toc = document.getElementById("toc");
    const main = document.getElementById("operations");
    for (const [tag, ops] of byTag) {
      toc.append(el("h2", {text: tag}));
      const section = el("section", {class: "tag"}, [el("h2", {text: tag})]);
      for (const {path, method, op, id} of ops) {
        toc.append(el("a", {href: "#" + id, title: method.toUpperCase() + " " + path},
          [el("span", {class: "method " + method, text: method}), " " + path]));
        section.append(el("article", {id}, [
          el("h3", {}, [el("span", {class: "method " + method, text: method}),
            el("span", {class: "path", text: path}),
            op.security && op.security.length ? el("span", {class: "lock", text: t("bearer")}) : el("span", {class: "lock", text: t("open")})]),
          el("p", {class: "summary", text: op.summary || ""}),
          op.description ? el("p", {class: "rule", text: op.description}) : null,
          parameters(op), requestBody(op), responses(op),
        ]));
      }
      main.append(section);
    }
    document.body.dataset.rendered = String(index);
  }

  fetch("/api/v1/openapi.json", {headers: {Accept: "application/json"}})
    .then((resp) => {
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      return resp.json();
    })
    .then((json) => { doc = json; render(); })
    .catch((err) => {
      const meta = document.getElementById("meta");
      meta.textContent = t("failed", {error: err.message});
      meta.className = "error";
    });
})();
