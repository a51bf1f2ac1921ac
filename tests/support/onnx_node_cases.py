"""Writes ONNX's node test suite to a directory, one folder per case.

Each case that `onnx.backend.test.case.node.collect_testcases()` returns
becomes `OUT/<case>/model.onnx` plus, per data set k,
`OUT/<case>/test_data_set_k/input_i.pb` and `output_i.pb` (TensorProtos),
the layout ONNX's own `backend-test-tools generate-data` writes, and a file
`tolerance` with the case's own `rtol atol`. A data set
holding something other than plain tensors (a sequence, an optional, a map)
gets a file `not_tensors` instead, so the reader can say why it skips it.

Usage: python onnx_node_cases.py OUT
Prints the number of cases written.
"""

import os
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases


def write_tensor(path, name, value):
    if isinstance(value, onnx.TensorProto):
        value.name = name
        with open(path, "wb") as f:
            f.write(value.SerializeToString())
        return
    if not isinstance(value, np.ndarray):
        value = np.asarray(value)
    if value.dtype == object:
        raise TypeError("not a plain tensor")
    proto = numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def main(out):
    warnings.simplefilter("ignore")
    cases = [c for c in collect_testcases() if c.kind == "node"]
    for case in cases:
        folder = os.path.join(out, case.name)
        os.makedirs(folder, exist_ok=True)
        onnx.save(case.model, os.path.join(folder, "model.onnx"))
        with open(os.path.join(folder, "tolerance"), "w") as f:
            f.write(f"{case.rtol} {case.atol}\n")
        graph = case.model.graph
        for k, (inputs, outputs) in enumerate(case.data_sets):
            data = os.path.join(folder, f"test_data_set_{k}")
            os.makedirs(data, exist_ok=True)
            try:
                for i, v in enumerate(inputs):
                    write_tensor(os.path.join(data, f"input_{i}.pb"), graph.input[i].name, v)
                for i, v in enumerate(outputs):
                    write_tensor(os.path.join(data, f"output_{i}.pb"), graph.output[i].name, v)
            except (TypeError, ValueError, AttributeError, IndexError):
                with open(os.path.join(data, "not_tensors"), "w") as f:
                    f.write("a value of this data set is not a plain tensor\n")
    print(len(cases))


if __name__ == "__main__":
    main(sys.argv[1])
