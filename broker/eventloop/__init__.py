"""The event loop every connection shares, kept responsive: work that grows with a request
yields or runs off the loop (``pacing``), the slow-step watchdog (``watchdog``), process
limits such as open files (``limits``).
"""
