"""The models the gateway serves, each owning its *batch form*.

A predictor takes a batch in one of two forms (`backends.base.BatchForm`): typed tensors
(Open Inference Protocol predictors) or one JSON tensor of KServe v1 instances (v1 and
TorchServe predictors). Clients of every front end reach every model, so each request is
converted to its model's form before it is queued, and the model's answer is converted
back to what its client speaks. That is what a served model owns, in one place:

- `check_inputs`: an OIP request's inputs as their headers declare them, checked against
  the model's signature (names, datatypes, rows, each row's shape) before any payload is
  decoded (`wire.request.RequestHead`): a 64 MB tensor of the wrong kind costs its header;
- `batch_inputs_from_tensors` / `_instances` / `_upload`: an OIP, v1 or TorchServe request in the
  model's batch form (as its kind asks: `batch_inputs` hands every request to the kind),
  checked against the model's signature (by `check_inputs` for tensors);
- `tensors_from_outputs` / `predictions_from_outputs`: the batch result as OIP output
  tensors or v1 predictions;
- its signature (from config, else learned from the predictor's metadata and re-read
  every `METADATA_REFRESH_S`, so a predictor restarted with another model is followed),
  versions, readiness and OIP metadata.

A model that describes no tensors (a custom `kserve.Model`, KServe's sklearn and xgboost
runtimes, every v1 predictor) is served all the same: its readiness is its predictor's,
OIP requests pass through with their own names and datatypes, and an OIP client of a v1
predictor gets KServe's own convention for the predictions (`output-0`, the datatype taken
from the values), and v1 instances for a tensor predictor that lists no inputs travel as
its twin (`input-0`). Only a conversion that needs a name nobody gave is refused, at
request time, with 400 naming the config key that would supply it.

A TorchServe upload (a raw body, form parts or gRPC entries: `wire.upload`) is one row:
`batch_inputs_from_upload` (`gateway.models.uploads`) makes it an instance of named values for a
v1 or TorchServe predictor, or BYTES tensors for a tensor predictor.

A model with variable-length inputs (`batching.padding`) takes typed tensors whatever its
predictor: requests of different lengths are padded together in the scheduler, so its v1
clients' instances may be ragged along the declared dimension (each keeps its own length,
and per-token predictions come back at that length), and a v1 predictor of such a model
gets the padded batch as instances (`PaddedInstanceModel`). Its generated inputs (each
row's length or mask) are filled by the scheduler: clients never send them and its OIP
metadata does not list them.

`TensorModel` (`tensor.py`) and `InstanceModel` (`instance.py`, with
`PaddedInstanceModel`) are the two forms, each a `ServedModel` (`base.py`: the interface,
the checks every form shares, and the metadata); `forms.served_model` picks one from the
backend. What a model's rows mean is its kind's (`ServedModel.kind`, `gateway.kinds`: the
default tensors, texts embedded, pairs scored), which reads each client's request into the
form and answers it; the form knows no kind. The package imports one way (forms -> instance
-> tensor -> base; a lint-imports contract). It knows no wire format (codecs
decode before it and encode after it), nothing of the scheduler, and no predictor protocol
beyond the backend interface.
"""
