from fraglib.bench import main

main()
