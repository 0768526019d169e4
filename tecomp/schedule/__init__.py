from .schedule import SCOPES, Fuse, IterAttr, Schedule, Split, Stage, create_schedule
