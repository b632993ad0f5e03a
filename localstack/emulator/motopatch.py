# moto_server with one fix, for stepflow's local stack.
#
# moto 5.x deep-copies a state machine on every StartExecution, running
# executions included; an execution that is running holds a thread lock,
# which cannot be copied, so a second StartExecution while another
# execution of the same state machine runs fails with 500 ("cannot pickle
# '_thread.RLock' object"). The timer state machine always has executions
# running. The copy is only a snapshot of the definition for the new
# execution, so the list of executions is shared instead of copied.
import copy
import sys

from moto.stepfunctions import models


def _deepcopy(self, memo):
    clone = self.__class__.__new__(self.__class__)
    memo[id(self)] = clone
    for name, value in self.__dict__.items():
        setattr(clone, name, value if name == "executions" else copy.deepcopy(value, memo))
    return clone


models.StateMachineInstance.__deepcopy__ = _deepcopy

from moto.server import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
