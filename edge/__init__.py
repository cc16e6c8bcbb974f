"""edge: a Kubernetes edge router and ingress controller."""

__version__ = "0.1.0"
