// A small builder for ONNX graphs and the writer that turns one into ModelProto bytes
// (IR 10, ai.onnx opset 21, com.microsoft opset 1). Initializers are either embedded (raw_data)
// or laid out in one external-data blob; the builder never copies weight bytes until encoding.
import onnxProto from 'onnx-proto';

const { onnx } = onnxProto;

export type ElemType = 'float32' | 'float16' | 'uint8' | 'int8' | 'int32' | 'int64';

const DATA_TYPE: Record<ElemType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float16: onnx.TensorProto.DataType.FLOAT16,
  uint8: onnx.TensorProto.DataType.UINT8,
  int8: onnx.TensorProto.DataType.INT8,
  int32: onnx.TensorProto.DataType.INT32,
  int64: onnx.TensorProto.DataType.INT64,
};

export const ELEM_BYTES: Record<ElemType, number> = {
  float32: 4,
  float16: 2,
  uint8: 1,
  int8: 1,
  int32: 4,
  int64: 8,
};

/** A dimension: a fixed size or a symbolic name (e.g. 'batch'). */
export type Dim = number | string;

export type AttrValue = number | string | number[] | { float: number } | { floats: number[] };

export interface Initializer {
  name: string;
  type: ElemType;
  dims: number[];
  /** Little-endian element bytes, exactly product(dims) * ELEM_BYTES[type] long; empty once spilled. */
  bytes: Uint8Array;
  /** Where a spilled initializer's bytes went: the external-data file (or `location`, a file of its own). */
  spilled?: { offset: number; length: number; location?: string };
}

/** Where `GraphBuilderOptions.place` put an initializer's bytes: a file next to the model. */
export interface ExternalRef {
  location: string;
  offset: number;
  length: number;
}

export interface GraphBuilderOptions {
  /**
   * Writes an initializer's bytes to the external-data file now and says where; the builder then
   * keeps no reference to them (large initializers only, EXTERNAL_MIN_BYTES and up).
   */
  spill?: (bytes: Uint8Array) => { offset: number; length: number };
  /**
   * Asked first for every initializer, whatever its size: returns where its bytes are (written now,
   * or already there from an earlier build: then `bytes` may be empty and is not checked), or
   * undefined to leave it to `spill` / the model. The shard cache keeps each layer in its own file.
   */
  place?: (name: string, type: ElemType, dims: number[], bytes: Uint8Array) => ExternalRef | undefined;
}

interface NodeSpec {
  op: string;
  domain: string;
  inputs: string[];
  outputs: string[];
  attrs: Record<string, AttrValue>;
  name: string;
}

interface ValueSpec {
  name: string;
  type: ElemType;
  dims: Dim[];
}

export const MS_DOMAIN = 'com.microsoft';

/** Collects nodes, inputs, outputs and initializers; `encodeModel` serializes them. */
export class GraphBuilder {
  readonly nodes: NodeSpec[] = [];
  readonly inputs: ValueSpec[] = [];
  readonly outputs: ValueSpec[] = [];
  readonly initializers: Initializer[] = [];
  private readonly names = new Set<string>();
  private counter = 0;

  constructor(
    readonly name: string,
    private readonly opts: GraphBuilderOptions = {},
  ) {}

  input(name: string, type: ElemType, dims: Dim[]): string {
    this.claim(name);
    this.inputs.push({ name, type, dims });
    return name;
  }

  output(name: string, type: ElemType, dims: Dim[]): string {
    this.outputs.push({ name, type, dims });
    return name;
  }

  initializer(name: string, type: ElemType, dims: number[], bytes: Uint8Array): string {
    const placed = this.opts.place?.(name, type, dims, bytes);
    if (placed !== undefined) {
      this.claim(name);
      this.initializers.push({ name, type, dims, bytes: new Uint8Array(0), spilled: placed });
      return name;
    }
    const expected = dims.reduce((a, b) => a * b, 1) * ELEM_BYTES[type];
    if (bytes.byteLength !== expected) {
      throw new Error(`initializer ${name}: ${bytes.byteLength} bytes for dims [${dims.join(', ')}] ${type} (expected ${expected})`);
    }
    this.claim(name);
    if (this.opts.spill !== undefined && bytes.byteLength >= EXTERNAL_MIN_BYTES) {
      this.initializers.push({ name, type, dims, bytes: new Uint8Array(0), spilled: this.opts.spill(bytes) });
    } else {
      this.initializers.push({ name, type, dims, bytes });
    }
    return name;
  }

  /** A small int64 constant (shapes, axes). */
  int64s(name: string, values: number[], dims: number[] = [values.length]): string {
    const bytes = new Uint8Array(values.length * 8);
    const view = new DataView(bytes.buffer);
    values.forEach((v, i) => view.setBigInt64(i * 8, BigInt(v), true));
    return this.initializer(name, 'int64', dims, bytes);
  }

  /**
   * Adds a node; returns its output names. `outputs` is a count (fresh names from `hint`) or
   * explicit names; an empty string marks an optional output that is not wanted.
   */
  node(
    op: string,
    inputs: string[],
    opts: { outputs?: number | string[]; attrs?: Record<string, AttrValue>; domain?: string; hint?: string } = {},
  ): string[] {
    const hint = opts.hint ?? op;
    const outs = Array.isArray(opts.outputs)
      ? opts.outputs
      : Array.from({ length: opts.outputs ?? 1 }, (_, i) => this.fresh(`${hint}_out${i}`));
    for (const o of outs) if (o !== '' && Array.isArray(opts.outputs)) this.claim(o);
    this.nodes.push({ op, domain: opts.domain ?? '', inputs, outputs: outs, attrs: opts.attrs ?? {}, name: this.fresh(hint) });
    return outs;
  }

  /** A node with exactly one output. */
  op(op: string, inputs: string[], opts: { attrs?: Record<string, AttrValue>; domain?: string; hint?: string; output?: string } = {}): string {
    const [out] = this.node(op, inputs, { ...opts, outputs: opts.output !== undefined ? [opts.output] : 1 });
    return out as string;
  }

  private fresh(hint: string): string {
    let name: string;
    do name = `${hint}_${this.counter++}`;
    while (this.names.has(name));
    this.names.add(name);
    return name;
  }

  private claim(name: string): void {
    if (this.names.has(name)) throw new Error(`graph ${this.name}: duplicate value name ${name}`);
    this.names.add(name);
  }
}

export interface EncodedModel {
  /** ModelProto bytes. */
  model: Uint8Array;
  /** With `externalDataFile`: what to write where in that file (offsets 64-byte aligned). */
  external: Array<{ offset: number; bytes: Uint8Array }>;
  externalBytes: number;
}

/** Initializers at least this large go to external data when an external file is requested. */
export const EXTERNAL_MIN_BYTES = 1024;
const EXTERNAL_ALIGN = 64;

/** The offset at or after `end` where the next external initializer starts. */
export function alignExternal(end: number): number {
  return Math.ceil(end / EXTERNAL_ALIGN) * EXTERNAL_ALIGN;
}

/**
 * Serializes the graph. With `externalDataFile`, large initializers are referenced by
 * (location, offset, length) into one file that the caller writes next to the model from
 * `external` (no copy of the weights is made here); onnxruntime then reads them without
 * protobuf parsing.
 */
export function encodeModel(graph: GraphBuilder, opts: { externalDataFile?: string } = {}): EncodedModel {
  const external: Array<{ offset: number; bytes: Uint8Array }> = [];
  let externalBytes = 0;
  // Spilled initializers are already in the file: the others go after them.
  for (const init of graph.initializers) if (init.spilled !== undefined && (init.spilled.location ?? opts.externalDataFile) === opts.externalDataFile) externalBytes = Math.max(externalBytes, init.spilled.offset + init.spilled.length);
  const initializer = graph.initializers.map((init) => {
    const ref = (location: string, offset: number, length: number) =>
      onnx.TensorProto.create({
        name: init.name,
        dataType: DATA_TYPE[init.type],
        dims: init.dims,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: location },
          { key: 'offset', value: String(offset) },
          { key: 'length', value: String(length) },
        ],
      });
    if (init.spilled?.location !== undefined) return ref(init.spilled.location, init.spilled.offset, init.spilled.length);
    if (init.spilled !== undefined) {
      if (opts.externalDataFile === undefined) throw new Error(`initializer ${init.name} was spilled: encode with its externalDataFile`);
      return ref(opts.externalDataFile, init.spilled.offset, init.spilled.length);
    }
    if (opts.externalDataFile !== undefined && init.bytes.byteLength >= EXTERNAL_MIN_BYTES) {
      const offset = alignExternal(externalBytes);
      external.push({ offset, bytes: init.bytes });
      externalBytes = offset + init.bytes.byteLength;
      return ref(opts.externalDataFile, offset, init.bytes.byteLength);
    }
    return onnx.TensorProto.create({ name: init.name, dataType: DATA_TYPE[init.type], dims: init.dims, rawData: init.bytes });
  });

  const valueInfo = (v: ValueSpec) =>
    onnx.ValueInfoProto.create({
      name: v.name,
      type: {
        tensorType: {
          elemType: DATA_TYPE[v.type],
          shape: { dim: v.dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
        },
      },
    });

  const model = onnx.ModelProto.create({
    irVersion: 10,
    producerName: 'kiwi',
    opsetImport: [
      { domain: '', version: 21 },
      { domain: MS_DOMAIN, version: 1 },
    ],
    graph: {
      name: graph.name,
      node: graph.nodes.map((n) =>
        onnx.NodeProto.create({
          name: n.name,
          opType: n.op,
          domain: n.domain,
          input: n.inputs,
          output: n.outputs,
          attribute: Object.entries(n.attrs).map(([name, value]) => attribute(name, value)),
        }),
      ),
      input: graph.inputs.map(valueInfo),
      output: graph.outputs.map(valueInfo),
      initializer,
    },
  });
  return { model: onnx.ModelProto.encode(model).finish(), external, externalBytes };
}

function attribute(name: string, value: AttrValue): onnxProto.onnx.AttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if (typeof value === 'number') {
    if (!Number.isInteger(value)) throw new Error(`attribute ${name}: use { float } for non-integer ${value}`);
    return onnx.AttributeProto.create({ name, type: T.INT, i: value });
  }
  if (typeof value === 'string') return onnx.AttributeProto.create({ name, type: T.STRING, s: new TextEncoder().encode(value) });
  if (Array.isArray(value)) return onnx.AttributeProto.create({ name, type: T.INTS, ints: value });
  if ('float' in value) return onnx.AttributeProto.create({ name, type: T.FLOAT, f: value.float });
  return onnx.AttributeProto.create({ name, type: T.FLOATS, floats: value.floats });
}

/** Bytes of a Float32Array (no copy). */
export function f32Bytes(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}
