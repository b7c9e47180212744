"""Keep the Kubernetes clients off the DAG-parsing path.

When the Kubernetes provider is installed, the Spark provider's hook module imports its ``kube_client`` as it is
imported itself, and with it both Kubernetes clients (``kubernetes`` and ``kubernetes_asyncio``): about 2.7 s on
an idle 2-core machine, in every DAG parse and every task start, although only a submission to Kubernetes uses
them. :func:`defer_kubernetes_client` registers that module with the standard library's
:class:`importlib.util.LazyLoader` before the Spark provider is imported, so it is executed on its first use
instead.
"""

from __future__ import annotations

import importlib.util
import sys

KUBE_CLIENT = "airflow.providers.cncf.kubernetes.kube_client"


def defer_kubernetes_client() -> None:
    """Make ``kube_client`` a lazy module, if the Kubernetes provider is installed and it is not imported yet."""
    if KUBE_CLIENT in sys.modules:
        return
    try:
        spec = importlib.util.find_spec(KUBE_CLIENT)
    except ModuleNotFoundError:  # no Kubernetes provider: the Spark hook goes without it
        return
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[KUBE_CLIENT] = module
    spec.loader.exec_module(module)
    parent, _, name = KUBE_CLIENT.rpartition(".")
    setattr(sys.modules[parent], name, module)
