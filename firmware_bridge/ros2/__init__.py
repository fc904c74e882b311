"""The ``ros2`` backend: base, GPS, IMU and camera of a ROS 2 robot over DDS (Eclipse Cyclone DDS).

- :mod:`.msgs`: the ROS 2 message types as Cyclone IDL structs (``pkg::msg::dds_::Type_``, XCDR1).
- :mod:`.dds`: the shared participant (:class:`~.dds.DdsNode`), ``rt/`` topic names, ROS 2 QoS profiles,
  a loopback-only Cyclone configuration for tests and simulators.
- :mod:`.driver`, :mod:`.base`, :mod:`.sensors`: drivers with the serial drivers' readings API.

Only :mod:`.msgs` and :class:`~.dds.DdsNode` import ``cyclonedds`` (the ``ros2`` extra), and only when a
driver starts; nothing here is imported unless ``[robot] backend = "ros2"``.
"""
