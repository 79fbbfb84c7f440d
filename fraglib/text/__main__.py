from fraglib.text.build import main

main()
