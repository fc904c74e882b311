"""ROS 1 message definitions of the Jackal's rosserial messages, for the independent ``rosbags``
serialiser (golden frames and md5 sums). Texts as in jackal_msgs, rosserial_msgs and nmea_msgs."""

from __future__ import annotations

DEFINITIONS = {
    "jackal_msgs/msg/Drive": """
int8 MODE_VELOCITY=0
int8 MODE_PWM=1
int8 MODE_EFFORT=2
int8 MODE_NONE=-1
int8 LEFT=0
int8 RIGHT=1
int8 mode
float32[2] drivers
""",
    "jackal_msgs/msg/DriveFeedback": """
float32 current
float32 duty_cycle
float32 bridge_temperature
float32 motor_temperature
float32 measured_velocity
float32 measured_travel
bool driver_fault
""",
    "jackal_msgs/msg/Feedback": """
Header header
jackal_msgs/DriveFeedback[2] drivers
float32 pcb_temperature
float32 mcu_temperature
int8 commanded_mode
int8 actual_mode
""",
    "jackal_msgs/msg/Status": """
Header header
string hardware_id
duration mcu_uptime
duration connection_uptime
bool drivers_active
bool driver_external_stop_present
bool driver_external_stop_stopped
float32 measured_battery
float32 measured_12v
float32 measured_5v
float32 drive_current
float32 user_current
float32 computer_current
float32 total_current
float32 total_current_peak
float64 total_power_consumed
""",
    "rosserial_msgs/msg/TopicInfo": """
uint16 ID_PUBLISHER=0
uint16 ID_SUBSCRIBER=1
uint16 ID_SERVICE_SERVER=2
uint16 ID_SERVICE_CLIENT=4
uint16 ID_PARAMETER_REQUEST=6
uint16 ID_LOG=7
uint16 ID_TIME=10
uint16 ID_TX_STOP=11
uint16 topic_id
string topic_name
string message_type
string md5sum
int32 buffer_size
""",
    "nmea_msgs/msg/Sentence": """
Header header
string sentence
""",
}


def typestore():
    """A ROS 1 Noetic typestore with the definitions above registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    types = {}
    for name, text in DEFINITIONS.items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store
