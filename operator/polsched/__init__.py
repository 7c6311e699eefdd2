"""polsched: a Kubernetes-native scheduler driven by SchedulingPolicy custom resources."""

__version__ = "0.1.0"
