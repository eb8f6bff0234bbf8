"""suanli: schedules work onto heterogeneous compute across cloud, edge and devices."""

__version__ = "0.1.0"
