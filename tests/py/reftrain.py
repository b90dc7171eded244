"""What the PyTorch reference models share (tests/py/torch_gpt.py, tests/py/torch_llama.py): a
module holding a checkpoint's tensors as float64 parameters by their Hugging Face names, and the
AdamW run (torch.optim.AdamW with two weight-decay groups, clip_grad_norm_) over batches."""
import numpy as np
import torch


class NamedParams(torch.nn.Module):
    """Every tensor of `weights` (name -> array) as a float64 parameter, reachable by its name."""

    def __init__(self, weights):
        super().__init__()
        self.p = torch.nn.ParameterDict()
        self.names = {}  # ParameterDict keys may not contain '.'
        for name, w in weights.items():
            key = name.replace(".", "__")
            self.names[name] = key
            self.p[key] = torch.nn.Parameter(torch.tensor(w, dtype=torch.float64))

    def has(self, name):
        return name in self.names

    def w(self, name):
        return self.p[self.names[name]]

    def grads(self):
        return {"grad." + name: self.p[key].grad.numpy().copy() for name, key in self.names.items()}


def adamw_losses(model, decays, loss_of, steps, hyper):
    """The losses of `steps` AdamW steps; decays(name) says which tensors get weight decay;
    loss_of(s) is batch s's loss through the model."""
    decay = [model.p[k] for n, k in model.names.items() if decays(n)]
    no_decay = [model.p[k] for n, k in model.names.items() if not decays(n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hyper["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"])
    losses = []
    for s in range(steps):
        opt.zero_grad()
        loss = loss_of(s)
        loss.backward()
        if hyper["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), hyper["grad_clip"])
        opt.step()
        losses.append(loss.item())
    return np.array(losses)
