"""Every condition of a correctness call, in words: what correctness.md lists, and what a failure names (the call
"where" a condition held).  Data only, read by the conditions and the judge."""

CONDITION_WORDS = {
    "plain": "the problem's inputs, every output poisoned, eval() without autograd",
    "pre:zeros": "the outputs handed to the kernel held zeros before the call",
    "pre:random": "the outputs handed to the kernel held random values before the call",
    "pre:stale": "the outputs handed to the kernel held the right answer of other inputs before the call",
    "mode:train+grad": "the model in training mode with autograd on, as a freshly built module is called",
    "mode:train": "the model in training mode, autograd off",
    "mode:grad": "the model in eval() with autograd on",
    "mode:inference": "the model in eval() under torch.inference_mode()",
    "call:nograd": "the call under torch.no_grad(), as a user's inference runs",
    "call:inference": "the call under torch.inference_mode()",
    "range:up": "inputs scaled up (x20 to x500)",
    "range:up:lo": "inputs scaled up by x20, the near end of that range",
    "range:up:hi": "inputs scaled up by x500, the far end of that range",
    "range:down": "inputs scaled down (x0.002 to x0.05)",
    "range:down:lo": "inputs scaled down by x0.002, the far end of that range",
    "range:down:hi": "inputs scaled down by x0.05, the near end of that range",
    "range:shift": "inputs shifted by 2 to 8 RMS (zeros kept)",
    "range:shift:lo": "inputs shifted by 2 RMS, the near end of that range (zeros kept)",
    "range:shift:hi": "inputs shifted by 8 RMS, the far end of that range (zeros kept)",
    "range:flip": "inputs scaled by x-0.5 to x-2 (their signs flipped: inputs drawn never negative go negative)",
    "range:sink": "inputs shifted down by 2 to 500 RMS (zeros kept)",
    "range:sink:lo": "inputs shifted down by 500 RMS, the far end of that range (zeros kept)",
    "range:sink:hi": "inputs shifted down by 2 RMS, the near end of that range (zeros kept)",
    "layout:strided": "every input handed as a strided view (every other element of a wider tensor), as a user's slice is",
    "layout:padded": "every input handed as rows of a wider tensor (a column slice, big[:, :n]: unit stride along "
                     "the last dim, rows further apart)",
    "layout:moved": "every input (and every output it is handed) in memory of its own, at another address (a user's next)",
    "mode:train:frozen": "the model in training mode, autograd off, its norm layers in eval() (a user fine-tuning with "
                         "frozen BatchNorm: model.train(), then model.bn.eval()): each layer's own .training decides",
    "mode:train-step": "the model in training mode, autograd off, from the running statistics it held, left as the call "
                       "updates them (nothing put back: a user's training step)",
    "mode:inference:held": "the model in eval() under torch.inference_mode(), from the running statistics it holds",
    "mode:train-step+grad": "the model in training mode with autograd on, from the running statistics it held, left as "
                            "the call updates them, and backward() (a user's training step)",
    "mode:after-train": "the model in eval() right after that training-mode call and the steps before it, from the "
                        "statistics they left",
    "mode:after-train:inference": "the model in eval() under torch.inference_mode(), after training-mode calls, from "
                                  "the statistics they left",
    "weights:updated": "one of the model's parameters (or a norm's running mean) changed in place on about half its "
                       "elements before the call, by noise or by a swap of their values that keeps every sum (a training "
                       "step on part of the model, a layer reloaded with its units in another order), and put back",
    "weights:updated:again": "the model's parameters changed in place before the call, on the inputs of the last call, put back",
    "weights:twin": "a second instance of the model, with other weights, called in place of the first (a network's second "
                    "layer of one shape); the first is called next, its weights as they were",
    "weights:twin:train": "a second instance of the model, with other weights, called in training mode without autograd "
                          "in place of the first (a network's second layer of one shape); the first is called next",
    "weights:twin:again": "a second instance of the model, with other weights, called under torch.inference_mode() on the "
                          "inputs of the call before it; the first is called next",
    "input:again": "the inputs of the call before it again (a user's repeated batch)",
    "weights:stepped": "the model's parameters changed in place before the call and left so (an optimizer step), then "
                       "called at the run's batch size again with no other change",
    "batch:other": "a batch size other than the run's, on the instance the run's shapes called, as a user's next "
                   "batch",
    "batch:back": "the run's batch size again, after calls at other sizes and a change of the parameters there",
}
