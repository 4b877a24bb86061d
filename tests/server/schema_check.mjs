// The JSON-Schema subset the server's automaton binds (type, enum, const, properties, required,
// additionalProperties, items, min/maxItems, min/maxLength), checked independently of the
// server: the SDK tests validate its answers and tool arguments with it.
export function valid(schema, v) {
  const same = (a, b) => a === b && typeof a === typeof b;
  if ('const' in schema) return same(v, schema.const);
  if ('enum' in schema) return schema.enum.some((e) => same(v, e));
  const kind = Array.isArray(v) ? 'array' : v === null ? 'null' : typeof v;
  switch (schema.type) {
    case undefined: return true;
    case 'null': return v === null;
    case 'boolean': return kind === 'boolean';
    case 'integer': return Number.isInteger(v);
    case 'number': return kind === 'number';
    case 'string':
      return kind === 'string' && [...v].length >= (schema.minLength ?? 0) &&
        [...v].length <= (schema.maxLength ?? Infinity);
    case 'array':
      return kind === 'array' && v.length >= (schema.minItems ?? 0) &&
        v.length <= (schema.maxItems ?? Infinity) && v.every((x) => valid(schema.items ?? {}, x));
    case 'object': {
      if (kind !== 'object') return false;
      const props = schema.properties ?? {};
      if ((schema.required ?? []).some((r) => !(r in v))) return false;
      return Object.entries(v).every(([k, x]) =>
        k in props ? valid(props[k], x) : schema.additionalProperties !== false);
    }
    default: return false;
  }
}
