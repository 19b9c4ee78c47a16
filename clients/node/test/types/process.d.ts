// The one Node global the consumers use; the package's types need no @types/node.
declare const process: { env: Record<string, string | undefined> };
