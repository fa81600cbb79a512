"""Writes a TensorFlow SavedModel version directory (`saved_model.pb`, `variables/`)
independently of tokenflow's reader, as `tf.saved_model.save(model, ...)` lays one out:

- `variables/variables.index`: TensorFlow's tensor bundle index, a LevelDB-format table written
  by libleveldb's own TableBuilder (the write_leveldb_table tool, TF_WRITE_TABLE); its "" key
  holds a BundleHeaderProto, every checkpoint key a BundleEntryProto (dtype, shape, shard,
  offset, size, masked CRC32C);
- `variables/variables.data-00000-of-00001`: the tensors' little-endian bytes;
- the key `_CHECKPOINTABLE_OBJECT_GRAPH`: a DT_STRING scalar ([varint64 length][4-byte
  checksum][bytes]) holding the TrackableObjectGraph whose attributes map each checkpoint key
  (`variables/<i>/.ATTRIBUTES/VARIABLE_VALUE`) to the variable's full name;
- `saved_model.pb`: a SavedModel whose 'serve' meta graph has the generate signature
  (`input_ids`, `attention_mask` -> one output).

The messages come from the repository's copies of TensorFlow's protos, compiled here with
python3-grpc-tools.
"""

import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
_STUBS = None


def _protos():
    global _STUBS
    if _STUBS is None:
        _STUBS = tempfile.mkdtemp(prefix="tf_bundle_stubs_")
        files = ["tensorflow/core/framework/types.proto",
                 "tensorflow/core/framework/tensor_shape.proto",
                 "tensorflow/core/protobuf/tensor_bundle.proto",
                 "tensorflow/core/protobuf/meta_graph.proto"]
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I",
                        os.path.join(REPO, "proto"), "--python_out", _STUBS, *files], check=True)
        for d, _, _ in os.walk(_STUBS):
            open(os.path.join(d, "__init__.py"), "a").close()
        sys.path.insert(0, _STUBS)
    from tensorflow.core.protobuf import tensor_bundle_pb2, meta_graph_pb2
    from tensorflow.core.framework import types_pb2
    return tensor_bundle_pb2, meta_graph_pb2, types_pb2


def _crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _masked(crc):  # TensorFlow's (and LevelDB's) masked CRC
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def save_saved_model(out_dir, tf_weights, output_name="output_0", checksum=True):
    """tf_weights: {full TF name (with ':0'): (layer, numpy array)} as tf_h5_io makes them."""
    import numpy as np
    bundle, meta, types = _protos()
    os.makedirs(os.path.join(out_dir, "variables"), exist_ok=True)
    data = bytearray()
    entries = {}
    graph = bundle.TrackableObjectGraph()
    root = graph.nodes.add()
    listing = graph.nodes.add()
    root.children.add(node_id=1, local_name="variables")

    def add_entry(key, dtype, shape, raw):
        e = bundle.BundleEntryProto(dtype=dtype, shard_id=0, offset=len(data), size=len(raw))
        for d in shape:
            e.shape.dim.add(size=d)
        e.crc32c = _masked(_crc32c(raw)) if checksum else 0
        data.extend(raw)
        entries[key] = e.SerializeToString()

    for i, name in enumerate(sorted(tf_weights)):
        a = np.ascontiguousarray(tf_weights[name][1], dtype="<f4")
        key = "variables/%d/.ATTRIBUTES/VARIABLE_VALUE" % i
        add_entry(key, types.DT_FLOAT, a.shape, a.tobytes())
        node = graph.nodes.add()
        listing.children.add(node_id=len(graph.nodes) - 1, local_name=str(i))
        node.attributes.add(name="VARIABLE_VALUE", full_name=name.replace(":0", ""),
                            checkpoint_key=key)
    # A save counter, as every TF2 checkpoint has (an int64: not a weight).
    add_entry("save_counter/.ATTRIBUTES/VARIABLE_VALUE", types.DT_INT64, (),
              struct.pack("<q", 1))
    g = graph.SerializeToString()
    lengths = _varint(len(g))
    raw = lengths + struct.pack("<I", _masked(_crc32c(struct.pack("<Q", len(g))))) + g
    add_entry("_CHECKPOINTABLE_OBJECT_GRAPH", types.DT_STRING, (), raw)

    header = bundle.BundleHeaderProto(num_shards=1, endianness=bundle.BundleHeaderProto.LITTLE)
    header.version.producer = 1
    entries[""] = header.SerializeToString()
    with open(os.path.join(out_dir, "variables", "variables.data-00000-of-00001"), "wb") as f:
        f.write(bytes(data))
    lines = "".join("%s %s\n" % (k.encode().hex() or "-", v.hex()) for k, v in entries.items())
    tool = os.environ.get("TF_WRITE_TABLE")
    if not tool:
        raise RuntimeError("TF_WRITE_TABLE is not set: the write_leveldb_table tool's path")
    subprocess.run([tool, os.path.join(out_dir, "variables", "variables.index")],
                   input=lines, text=True, check=True)

    saved = meta.SavedModel(saved_model_schema_version=1)
    mg = saved.meta_graphs.add()
    mg.meta_info_def.tags.append("serve")
    sig = mg.signature_def["serving_default"]
    sig.method_name = "tensorflow/serving/predict"
    for n in ("input_ids", "attention_mask"):
        t = sig.inputs[n]
        t.name = "serving_default_%s:0" % n
        t.dtype = types.DT_INT32
        t.tensor_shape.dim.add(size=-1)
        t.tensor_shape.dim.add(size=-1)
    out = sig.outputs[output_name]
    out.name = "StatefulPartitionedCall:0"
    out.dtype = types.DT_INT32
    with open(os.path.join(out_dir, "saved_model.pb"), "wb") as f:
        f.write(saved.SerializeToString())
    return out_dir
